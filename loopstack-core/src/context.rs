//! The context a transition sees: the run's documents, its id, place and step.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::document::{CheckedError, Document, DocumentType, Metadata, READ_DEPTH, SaveOptions, Unreadable};
use crate::events::{EventHub, EventKind};
use crate::runtime::Runtime;
use crate::store::RunId;

/// What a transition method can reach: the run's documents, its id and place, and
/// its cancellation.
///
/// Documents saved during a transition are visible to later reads of the same
/// transition at once, and reach the store together with the new state when the
/// transition completes. If the transition fails, none of them are kept.
pub struct RunContext {
    run_id: RunId,
    workflow: &'static str,
    place: &'static str,
    step: u64,
    /// The step of what is saved now: `step + 1`, or 0 while the run is created
    /// ([`RunContext::creating`]).
    save_step: u64,
    /// The step this drive took the run over at, when an earlier drive committed it
    /// (every drive but the one that created the run).
    took_over_at: Option<u64>,
    docs: Vec<Arc<Document>>,
    /// Positions in `docs` of the keyed documents, by key (any type): a keyed save
    /// finds its document without scanning the run.
    keyed: HashMap<String, Vec<usize>>,
    committed_len: usize,
    undo: Vec<(usize, Arc<Document>)>,
    pending: Vec<Arc<Document>>,
    /// Made when first asked for: a run driven without `cancel_on` and whose
    /// transitions never ask pays for no token.
    cancellation: std::sync::OnceLock<CancellationToken>,
    /// The runtime driving the run: its events, registered workflows and settings.
    runtime: Runtime,
    /// Child runs this transition started, in order; how many it started is the
    /// sequence number of the next one's id.
    children: Vec<crate::children::StartedChild>,
    /// The typed values of the documents saved last with [`RunContext::save_shared`]
    /// (at most [`SHARED_KEPT`]), by the document's identity: a read of one is a
    /// reference count, not a parse (a conversation is read at every model turn).
    /// Each entry holds its document, so the document's address cannot be reused
    /// by another while the entry lives.
    shared: SharedValues,
    /// Why the running transition stops the run ([`RunContext::stop`]).
    stop: Option<Box<str>>,
}

/// The typed values a context keeps of documents it saved, with the documents.
pub(crate) type SharedValues = Vec<(Arc<Document>, Arc<dyn std::any::Any + Send + Sync>)>;

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("run_id", &self.run_id)
            .field("workflow", &self.workflow)
            .field("place", &self.place)
            .field("step", &self.step)
            .field("documents", &self.docs.len())
            .finish_non_exhaustive()
    }
}

impl RunContext {
    pub(crate) fn new(
        run_id: RunId,
        workflow: &'static str,
        (place, step): (&'static str, u64),
        docs: Vec<Arc<Document>>,
        cancellation: Option<CancellationToken>,
        runtime: Runtime,
    ) -> Self {
        let mut keyed: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, d) in docs.iter().enumerate() {
            if let Some(key) = &d.key {
                keyed.entry(key.clone()).or_default().push(i);
            }
        }
        let committed_len = docs.len();
        Self {
            run_id,
            workflow,
            place,
            step,
            save_step: step + 1,
            took_over_at: None,
            docs,
            keyed,
            committed_len,
            undo: Vec::new(),
            pending: Vec::new(),
            cancellation: cancellation.map(std::sync::OnceLock::from).unwrap_or_default(),
            runtime,
            children: Vec::new(),
            shared: Vec::new(),
            stop: None,
        }
    }

    /// A context outside any runtime, over a fresh in-memory run: for unit tests of
    /// code that takes a `&mut RunContext`. Documents saved here are never committed.
    pub fn detached(workflow: &'static str) -> Self {
        let runtime = Runtime::new();
        Self::new(RunId::new(), workflow, (crate::START, 0), Vec::new(), None, runtime)
    }

    /// The context of [`Workflow::on_create`](crate::Workflow::on_create) for run
    /// `run_id`: what it saves is the run's at step 0.
    pub(crate) fn creating(run_id: RunId, workflow: &'static str, runtime: Runtime) -> Self {
        let mut cx = Self::new(run_id, workflow, (crate::START, 0), Vec::new(), None, runtime);
        cx.save_step = 0;
        cx
    }

    /// What a [`RunContext::creating`] context saved, for the run's creation, and
    /// the typed values it keeps of them, for the drive that goes on from there.
    pub(crate) fn into_created(self) -> (Vec<Arc<Document>>, SharedValues) {
        (self.pending, self.shared)
    }

    /// Keeps the typed values a context of this run kept before
    /// ([`RunContext::into_created`]): reads of those documents need no parse.
    pub(crate) fn keep_shared(&mut self, shared: SharedValues) {
        self.shared = shared;
    }

    /// Marks the context's first checkpoint as committed by an earlier drive.
    pub(crate) fn taken_over(mut self) -> Self {
        self.took_over_at = Some(self.step);
        self
    }

    /// The documents saved since the last commit, for the next one to write.
    pub(crate) fn take_pending(&mut self) -> Vec<Arc<Document>> {
        std::mem::take(&mut self.pending)
    }

    pub(crate) fn committed(&mut self, step: u64, place: &'static str) {
        self.step = step;
        self.save_step = step + 1;
        self.place = place;
        self.committed_len = self.docs.len();
        self.undo.clear();
    }

    pub(crate) fn rollback(&mut self) {
        for doc in &self.pending {
            let seq = doc.seq as usize;
            if let (Some(key), true) = (&doc.key, seq >= self.committed_len)
                && let Some(positions) = self.keyed.get_mut(key)
            {
                positions.retain(|&p| p != seq);
                if positions.is_empty() {
                    self.keyed.remove(key);
                }
            }
        }
        self.children.clear();
        self.shared.clear();
        self.stop = None;
        self.docs.truncate(self.committed_len);
        for (i, doc) in self.undo.drain(..).rev() {
            self.docs[i] = doc;
        }
        self.pending.clear();
    }

    /// The run's id.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// The workflow's name.
    pub fn workflow(&self) -> &'static str {
        self.workflow
    }

    /// The place the running transition left from.
    pub fn place(&self) -> &'static str {
        self.place
    }

    /// How many transitions completed before this one; the running transition
    /// commits as step `step() + 1`.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Stops the run instead of committing the running transition: for a step a
    /// limit or a safety check forbids (a spent budget, a model that repeats its
    /// calls). When the transition returns `Ok`, nothing of it is stored (its state,
    /// its documents; children it started are cancelled) and the run ends
    /// [`Stopped`](crate::RunStatus::Stopped) at its last checkpoint with `reason`
    /// as its error: listed apart from runs that completed, its parent told, and a
    /// [retry](crate::Runtime::retry) takes the step again, after the limit was
    /// raised. A wait transition that stops the run takes its signal as rejected
    /// with `reason`. The drive's outcome is [`RunOutcome::Stopped`](crate::RunOutcome::Stopped).
    pub fn stop(&mut self, reason: impl Into<String>) {
        self.stop = Some(reason.into().into_boxed_str());
    }

    /// Why the transition that just ran stops the run, if it does.
    pub(crate) fn take_stop(&mut self) -> Option<Box<str>> {
        self.stop.take()
    }

    /// Whether this transition may repeat one an earlier drive of the run began: it
    /// is the first transition of a drive that took the run over at a checkpoint
    /// another drive committed (a resume after a crash, a worker's recovery, a
    /// retry, a signal's drive, a fork). Whatever that drive did after its last
    /// commit (a tool it started, a request it sent) may have happened, and this
    /// transition cannot know. Later transitions of the same drive start from a
    /// checkpoint this drive committed, and are `false`; so is every transition of
    /// the drive that created the run.
    ///
    /// Steps with an effect that must not happen twice read it: the LLM layer does
    /// not run an at-most-once tool call ([`Effect::AtMostOnce`](crate::Effect::AtMostOnce))
    /// in such a transition, but asks a person what happened.
    ///
    /// ```
    /// let cx = loopstack_core::RunContext::detached("demo");
    /// assert!(!cx.may_repeat());
    /// ```
    pub fn may_repeat(&self) -> bool {
        self.took_over_at == Some(self.step)
    }

    /// Cancelled when the run is cancelled.
    pub fn cancellation(&self) -> &CancellationToken {
        self.cancellation.get_or_init(CancellationToken::new)
    }

    /// The token of [`RunContext::cancellation`] if there is one yet: the run was
    /// driven with a way to cancel it, or something asked for the token. `None`
    /// means nothing can cancel the run's steps so far, so work that would pass the
    /// token on (a batch of tool calls) can let its parts make their own when they
    /// ask, rather than make one for every batch.
    pub fn existing_cancellation(&self) -> Option<&CancellationToken> {
        self.cancellation.get()
    }

    /// Whether anyone subscribed to run events
    /// ([`Runtime::subscribe`](crate::Runtime::subscribe)): check it before doing
    /// work only events need, such as streaming a model's reply.
    #[inline]
    pub fn events_enabled(&self) -> bool {
        self.runtime.events().enabled()
    }

    /// Reports an event of this run to the runtime's subscribers. `kind` is called
    /// only when someone listens, so building the event costs nothing otherwise.
    #[inline]
    pub fn emit(&self, kind: impl FnOnce() -> EventKind) {
        self.runtime.events().emit(self.run_id, self.workflow, kind);
    }

    /// A handle that reports events of this run from elsewhere, such as the tasks
    /// of a tool batch; cheap to clone.
    pub fn emitter(&self) -> Emitter {
        Emitter { events: self.runtime.events().clone(), run_id: self.run_id, workflow: self.workflow }
    }

    /// The runtime driving the run: to start runs of other workflows, or to read
    /// its settings.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// How many child runs this transition started so far: the sequence number of
    /// the next one's id.
    pub(crate) fn children_started(&self) -> u64 {
        self.children.len() as u64
    }

    /// Records a child run this transition started, for the run loop to drive.
    pub(crate) fn child_started(&mut self, child: crate::children::StartedChild) {
        self.children.push(child);
    }

    /// The children this transition started, for the run loop to drive.
    pub(crate) fn take_children(&mut self) -> Vec<crate::children::StartedChild> {
        std::mem::take(&mut self.children)
    }

    /// Saves a typed document with the type's default tags.
    ///
    /// Errors like [`RunContext::save_with`].
    pub fn save<T: DocumentType>(&mut self, doc: &T) -> Result<&Arc<Document>, serde_json::Error> {
        self.save_with(doc, SaveOptions::new())
    }

    /// Saves a typed document with a key, tags and metadata.
    ///
    /// Content that would not read back is refused with an error and nothing is
    /// saved: a float that is NaN or infinite (JSON has no such number; it would be
    /// written as `null`), or arrays and objects nested more than 127 levels deep in
    /// the content or the metadata (serde_json reads no deeper). So is content that
    /// does not serialize at all (a map whose keys are not strings).
    pub fn save_with<T: DocumentType>(
        &mut self,
        doc: &T,
        options: SaveOptions,
    ) -> Result<&Arc<Document>, serde_json::Error> {
        let index = self.save_at(doc, options)?;
        Ok(&self.docs[index])
    }

    /// [`RunContext::save_with`], giving where the document is in [`RunContext::documents`].
    fn save_at<T: DocumentType>(&mut self, doc: &T, options: SaveOptions) -> Result<usize, serde_json::Error> {
        let content = crate::document::to_checked_raw_value(doc).map_err(|e| match e {
            CheckedError::Unreadable(why, _) => unreadable(T::TYPE, why),
            CheckedError::Serialize(e) => e,
        })?;
        let mut options = options;
        let metadata = metadata_of(T::TYPE, &mut options)?;
        for tag in T::default_tags().iter().rev() {
            if !options.tags.iter().any(|t| t == tag) {
                options.tags.insert(0, Cow::Borrowed(*tag));
            }
        }
        Ok(self.insert(T::TYPE.into(), content, options, metadata))
    }

    /// Saves a shared typed document like [`RunContext::save_with`], and keeps the
    /// value: [`RunContext::read_shared`] of the saved document then returns it
    /// without reading the JSON again. The values of the last [`SHARED_KEPT`]
    /// documents saved so are kept, for the rest of the drive.
    pub fn save_shared<T: DocumentType + Send + Sync + 'static>(
        &mut self,
        doc: Arc<T>,
        options: SaveOptions,
    ) -> Result<&Arc<Document>, serde_json::Error> {
        let index = self.save_at(&*doc, options)?;
        Ok(self.keep_shared_value(index, doc))
    }

    /// Saves `stored` and keeps `shared` as its value for the rest of the drive:
    /// the store gets a bounded form (a long result cut, with a marker) while the
    /// steps after this one, in this process, read the whole value. A resumed run
    /// reads what was stored. When the runtime has secrets, nothing is kept: reads
    /// parse what was stored, with the secrets redacted.
    pub fn save_shared_as<T: DocumentType + Send + Sync + 'static>(
        &mut self,
        stored: &T,
        shared: Arc<T>,
        options: SaveOptions,
    ) -> Result<&Arc<Document>, serde_json::Error> {
        let index = self.save_at(stored, options)?;
        Ok(self.keep_shared_value(index, shared))
    }

    /// Keeps `shared` as the value of the document at `index`, just saved.
    fn keep_shared_value<T: Send + Sync + 'static>(&mut self, index: usize, shared: Arc<T>) -> &Arc<Document> {
        // What was stored may have been redacted: then reads parse that, never the
        // value with the secret.
        if self.runtime.secrets().is_empty() {
            if self.shared.len() == SHARED_KEPT {
                self.shared.remove(0);
            }
            self.shared.push((self.docs[index].clone(), shared));
        }
        &self.docs[index]
    }

    /// Reads a document as a shared `T`: the value [`RunContext::save_shared`] kept
    /// when `doc` is the document it saved, else the document's content, read.
    pub fn read_shared<T: DocumentType + Send + Sync + 'static>(
        &self,
        doc: &Arc<Document>,
    ) -> Result<Arc<T>, serde_json::Error> {
        if let Some((_, value)) = self.shared.iter().rev().find(|(kept, _)| Arc::ptr_eq(kept, doc))
            && let Ok(value) = value.clone().downcast::<T>()
        {
            return Ok(value);
        }
        doc.read().map(Arc::new)
    }

    fn find_keyed(&self, doc_type: &str, key: &str) -> Option<usize> {
        self.keyed.get(key)?.iter().copied().find(|&i| self.docs[i].doc_type == doc_type)
    }

    /// Saves an untyped document whose content is already JSON.
    ///
    /// Content or metadata nested more than 127 levels deep is refused with an error
    /// and nothing is saved, as [`RunContext::save_with`] refuses it: serde_json
    /// would not read it back. (The check is one pass over the text.)
    pub fn save_raw(
        &mut self,
        doc_type: impl Into<Cow<'static, str>>,
        content: Box<RawValue>,
        options: SaveOptions,
    ) -> Result<&Arc<Document>, serde_json::Error> {
        let doc_type = doc_type.into();
        if crate::document::nests_deeper_than(content.get().as_bytes(), 0, READ_DEPTH) {
            return Err(unreadable(&doc_type, Unreadable::TooDeep));
        }
        if let Some(key) = crate::document::duplicate_key(content.get()) {
            return Err(unreadable(&doc_type, Unreadable::DuplicateKey(key)));
        }
        let mut options = options;
        let metadata = metadata_of(&doc_type, &mut options)?;
        let index = self.insert(doc_type, content, options, metadata);
        Ok(&self.docs[index])
    }

    fn insert(
        &mut self,
        doc_type: Cow<'static, str>,
        content: Box<RawValue>,
        options: SaveOptions,
        metadata: Metadata,
    ) -> usize {
        let SaveOptions { key, tags, .. } = options;
        let secrets = self.runtime.secrets();
        let (content, metadata) = if secrets.is_empty() {
            (content, metadata)
        } else {
            let metadata = match metadata.into_raw() {
                // Redacting strings in an object leaves an object.
                Some(raw) => Metadata::from_raw(crate::secrets::redact_raw(secrets, raw)).unwrap_or_default(),
                None => Metadata::new(),
            };
            (crate::secrets::redact_raw(secrets, content), metadata)
        };
        let existing = key.as_deref().and_then(|k| self.find_keyed(&doc_type, k));
        let (seq, version) = match existing {
            Some(i) => (self.docs[i].seq, self.docs[i].version + 1),
            None => (self.docs.len() as u64, 1),
        };
        if let (None, Some(k)) = (existing, &key) {
            self.keyed.entry(k.clone()).or_default().push(self.docs.len());
        }
        let doc = Arc::new(Document { seq, doc_type, key, version, tags, metadata, content, step: self.save_step });
        self.pending.push(doc.clone());
        match existing {
            Some(i) => {
                let old = std::mem::replace(&mut self.docs[i], doc);
                if i < self.committed_len {
                    self.undo.push((i, old));
                }
                i
            }
            None => {
                self.docs.push(doc);
                self.docs.len() - 1
            }
        }
    }

    /// The run's documents (current versions, in the order first saved), including
    /// those this transition saved so far.
    pub fn documents(&self) -> &[Arc<Document>] {
        &self.docs
    }

    /// The run's documents of type `T`, read as `T`, in order.
    pub fn documents_of<T: DocumentType>(&self) -> Result<Vec<T>, serde_json::Error> {
        self.docs.iter().filter(|d| d.doc_type == T::TYPE).map(|d| d.read()).collect()
    }

    /// The most recent document of type `T`.
    pub fn latest<T: DocumentType>(&self) -> Option<Result<T, serde_json::Error>> {
        self.docs.iter().rev().find(|d| d.doc_type == T::TYPE).map(|d| d.read())
    }

    /// The current document of type `T` with this key.
    pub fn get<T: DocumentType>(&self, key: &str) -> Option<Result<T, serde_json::Error>> {
        self.find_keyed(T::TYPE, key).map(|i| self.docs[i].read())
    }
}

/// The error of a document refused because it would not read back.
fn unreadable(doc_type: &str, why: Unreadable) -> serde_json::Error {
    serde::ser::Error::custom(format_args!("a `{doc_type}` document cannot be saved: {why}"))
}

/// The metadata `options` give, taken out of them: refused when it would not read
/// back (nested deeper than serde_json reads, or given whole and not an object).
fn metadata_of(doc_type: &str, options: &mut SaveOptions) -> Result<Metadata, serde_json::Error> {
    let entries = std::mem::take(&mut options.entries);
    // An entry's value is one level into the object.
    if entries.values().any(|v| crate::document::value_deeper_than(v, 1, READ_DEPTH)) {
        return Err(unreadable(doc_type, Unreadable::TooDeep));
    }
    match options.whole.take() {
        None => Ok(Metadata::from(entries)),
        Some(Err(why)) => {
            Err(serde::ser::Error::custom(format_args!("a `{doc_type}` document cannot be saved: {why}")))
        }
        Some(Ok(whole)) if entries.is_empty() => Ok(whole),
        Some(Ok(whole)) => {
            let mut map = whole.to_map();
            map.extend(entries);
            Ok(Metadata::from(map))
        }
    }
}

/// Reports events of one run; see [`RunContext::emitter`].
#[derive(Clone, Debug)]
pub struct Emitter {
    events: EventHub,
    run_id: RunId,
    workflow: &'static str,
}

impl Emitter {
    /// Whether anyone listens.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.events.enabled()
    }

    /// Reports an event built by `kind`, called only when someone listens.
    #[inline]
    pub fn emit(&self, kind: impl FnOnce() -> EventKind) {
        self.events.emit(self.run_id, self.workflow, kind);
    }
}

/// How many shared document values a context keeps ([`RunContext::save_shared`]).
pub const SHARED_KEPT: usize = 16;
