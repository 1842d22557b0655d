//! Documents: what a run saves, in order.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A document saved by a run: typed content plus its type name, an optional key,
/// tags and metadata.
///
/// The content is kept as serialized JSON: saving serializes once, and a store writes
/// the text as it is.
///
/// Saving a document whose key already exists in the run replaces it in place (the
/// run's list keeps its position) and raises its `version`; the store keeps the old
/// versions as history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Document {
    /// Position of the document's first version in the run, from 0.
    pub seq: u64,
    /// The document type, such as `llm_message`.
    pub doc_type: Cow<'static, str>,
    /// The key; saving the same key again replaces the document.
    pub key: Option<String>,
    /// 1 for the first save of a key, then 2, 3, ...
    pub version: u32,
    /// Tags, such as `conversation`.
    pub tags: Vec<Cow<'static, str>>,
    /// Free-form metadata, such as the provider and the token usage.
    pub metadata: Map<String, Value>,
    /// The content, as JSON.
    pub content: Box<RawValue>,
    /// The step (transition count) that saved this version.
    pub step: u64,
}

impl Document {
    /// Reads the content as a typed document.
    pub fn read<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.content.get())
    }

    /// The content as a JSON value.
    pub fn value(&self) -> Value {
        serde_json::from_str(self.content.get()).expect("a document's content is valid JSON")
    }

    /// Whether the document is of type `T`.
    pub fn is<T: DocumentType>(&self) -> bool {
        self.doc_type == T::TYPE
    }

    /// Whether the document carries a tag.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

impl PartialEq for Document {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
            && self.doc_type == other.doc_type
            && self.key == other.key
            && self.version == other.version
            && self.tags == other.tags
            && self.metadata == other.metadata
            && self.content.get() == other.content.get()
            && self.step == other.step
    }
}

/// A type that can be saved as a document.
///
/// ```
/// use loopstack_core::DocumentType;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Invoice { total_cents: u64 }
///
/// impl DocumentType for Invoice {
///     const TYPE: &'static str = "invoice";
/// }
/// ```
pub trait DocumentType: Serialize + DeserializeOwned {
    /// The stable type name stored with the document.
    const TYPE: &'static str;

    /// Tags every document of this type carries.
    fn default_tags() -> &'static [&'static str] {
        &[]
    }
}

/// How a document is saved: its key, tags and metadata.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use = "options do nothing until passed to `RunContext::save_with`"]
pub struct SaveOptions {
    pub(crate) key: Option<String>,
    pub(crate) tags: Vec<Cow<'static, str>>,
    pub(crate) metadata: Map<String, Value>,
}

impl SaveOptions {
    /// No key, no tags beyond the type's, no metadata.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the key; a later save with the same key replaces the document.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a tag.
    pub fn tag(mut self, tag: impl Into<Cow<'static, str>>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Adds a metadata entry.
    pub fn meta(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(name.into(), value.into());
        self
    }
}
