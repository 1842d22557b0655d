//! Secrets kept out of results, documents, logs and errors, and error details of
//! bounded length.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{Map, Value};

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// The shortest secret [`Secrets::register`] keeps, in characters (after trimming).
/// A shorter value would be redacted wherever it occurs by chance (`"ok"`, `"id"`,
/// `"123"`) and mangle the text around it without protecting anything.
pub const MIN_SECRET_CHARS: usize = 4;

/// A bound for error details a model or a person reads, in characters.
pub const DEFAULT_MAX_ERROR_CHARS: usize = 2_000;

/// The secret values to keep out of text: API keys, tokens, passwords.
///
/// Cheap to clone, and clones share one set: a value registered through any clone
/// (a runtime's, a tool's) is redacted by all of them from then on. The set only
/// grows.
///
/// [`redact`](Self::redact) replaces every occurrence of a registered secret with
/// [`REDACTED`]; occurrences that overlap (two secrets sharing characters, or one
/// secret repeating into itself, like `abab` in `ababab`) are replaced as one.
/// A secret is found as registered and also in its JSON-escaped form (as it appears
/// inside serialized JSON text, when it has quotes, backslashes or control
/// characters), so redacting a serialized document works too.
///
/// Its `Debug` output shows how many secrets it holds, never what they are.
///
/// ```
/// use loopstack_core::secrets::Secrets;
///
/// let secrets = Secrets::new();
/// assert!(secrets.register("sk-live-1234567890\n")); // trimmed: the newline of a key file
/// assert!(!secrets.register("abc")); // shorter than MIN_SECRET_CHARS: ignored
/// let shared = secrets.clone();
/// shared.register("tok_ABCDEF");
/// assert_eq!(
///     secrets.redact("auth failed for sk-live-1234567890 (token tok_ABCDEF), abc"),
///     "auth failed for [redacted] (token [redacted]), abc"
/// );
/// assert_eq!(format!("{secrets:?}"), "Secrets { count: 2 }");
/// ```
#[derive(Clone, Default)]
pub struct Secrets {
    inner: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// How many distinct secrets were registered: read without the lock, so an
    /// empty set costs one atomic load on every path that would redact.
    count: std::sync::atomic::AtomicUsize,
    lock: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    /// How many distinct secrets were registered.
    count: usize,
    /// What is searched for: each secret and, when it differs, its JSON-escaped form.
    forms: Vec<String>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets").field("count", &self.len()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Secrets {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let secrets = Self::new();
        for secret in iter {
            secrets.register(secret);
        }
        secrets
    }
}

impl Secrets {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a secret, without the whitespace around it (a key read from a file
    /// or an environment variable often ends in a newline the text it leaks into
    /// does not have). Returns whether it is redacted from now on: `false` when it
    /// is shorter than [`MIN_SECRET_CHARS`] and so ignored.
    pub fn register(&self, secret: impl AsRef<str>) -> bool {
        let secret = secret.as_ref().trim();
        if secret.chars().count() < MIN_SECRET_CHARS {
            return false;
        }
        let mut inner = self.inner.lock.write().unwrap_or_else(PoisonError::into_inner);
        if inner.forms.iter().any(|form| form == secret) {
            return true;
        }
        inner.count += 1;
        self.inner.count.store(inner.count, std::sync::atomic::Ordering::Release);
        inner.forms.push(secret.to_owned());
        let escaped = serde_json::to_string(secret).unwrap_or_default();
        let escaped = escaped.get(1..escaped.len().saturating_sub(1)).unwrap_or_default();
        if escaped != secret && !escaped.is_empty() {
            inner.forms.push(escaped.to_owned());
        }
        true
    }

    /// Registers a secret and returns the set, for building one.
    #[must_use]
    pub fn with(self, secret: impl AsRef<str>) -> Self {
        self.register(secret);
        self
    }

    /// How many secrets are registered.
    pub fn len(&self) -> usize {
        self.inner.count.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether no secret is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `text` with every occurrence of a secret replaced by [`REDACTED`]; borrowed,
    /// without allocating, when it has none.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let inner = self.inner.lock.read().unwrap_or_else(PoisonError::into_inner);
        if inner.forms.is_empty() || text.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for form in &inner.forms {
            // Every occurrence, overlapping ones too: the next search starts one
            // character after the start of the last match.
            let step = form.chars().next().map_or(1, char::len_utf8);
            let mut from = 0;
            while let Some(found) = text.get(from..).and_then(|rest| rest.find(form.as_str())) {
                let start = from + found;
                spans.push((start, start + form.len()));
                from = start + step;
            }
        }
        drop(inner);
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        spans.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut written = 0;
        let mut current: Option<(usize, usize)> = None;
        for (start, end) in spans {
            match &mut current {
                Some((_, current_end)) if start < *current_end => *current_end = (*current_end).max(end),
                _ => {
                    if let Some((s, e)) = current.replace((start, end)) {
                        out.push_str(&text[written..s]);
                        out.push_str(REDACTED);
                        written = e;
                    }
                }
            }
        }
        if let Some((s, e)) = current {
            out.push_str(&text[written..s]);
            out.push_str(REDACTED);
            written = e;
        }
        out.push_str(&text[written..]);
        Cow::Owned(out)
    }

    /// Redacts every string inside `value` in place, object keys included (two keys
    /// that redact to the same text keep one of their values). Returns whether
    /// anything changed.
    ///
    /// ```
    /// use loopstack_core::secrets::Secrets;
    /// use serde_json::json;
    ///
    /// let secrets = Secrets::new().with("hunter22");
    /// let mut value = json!({"log": ["login hunter22", {"_raw": "pw=hunter22"}], "n": 1});
    /// assert!(secrets.redact_value(&mut value));
    /// assert_eq!(value, json!({"log": ["login [redacted]", {"_raw": "pw=[redacted]"}], "n": 1}));
    /// ```
    pub fn redact_value(&self, value: &mut Value) -> bool {
        if self.is_empty() {
            return false;
        }
        let mut changed = false;
        // An explicit stack: no recursion, however deep the value nests.
        let mut stack = vec![value];
        while let Some(value) = stack.pop() {
            match value {
                Value::String(text) => {
                    if let Cow::Owned(redacted) = self.redact(text) {
                        *text = redacted;
                        changed = true;
                    }
                }
                Value::Array(items) => stack.extend(items.iter_mut()),
                Value::Object(map) => {
                    if map.keys().any(|key| matches!(self.redact(key), Cow::Owned(_))) {
                        let old = std::mem::take(map);
                        *map =
                            old.into_iter().map(|(key, v)| (self.redact(&key).into_owned(), v)).collect::<Map<_, _>>();
                        changed = true;
                    }
                    stack.extend(map.values_mut());
                }
                Value::Null | Value::Bool(_) | Value::Number(_) => {}
            }
        }
        changed
    }

    /// `text` redacted, then [bounded] to `max_chars` characters: the
    /// order that never leaves the start of a secret that straddles the cut.
    ///
    /// ```
    /// use loopstack_core::secrets::Secrets;
    ///
    /// let secrets = Secrets::new().with("SECRET-TOKEN");
    /// assert_eq!(
    ///     secrets.redact_bounded("bad key SECRET-TOKEN", 12),
    ///     "bad key [red… [truncated: 12 of 18 chars]"
    /// );
    /// ```
    pub fn redact_bounded<'a>(&self, text: &'a str, max_chars: usize) -> Cow<'a, str> {
        match self.redact(text) {
            Cow::Borrowed(text) => bounded(text, max_chars),
            Cow::Owned(text) => Cow::Owned(bounded(&text, max_chars).into_owned()),
        }
    }
}

/// `text` cut to at most `max_chars` characters (never inside a character), with a
/// marker saying how much there was: `… [truncated: N of M chars]`. The marker comes
/// on top of the `max_chars`. Borrowed, unchanged, when it fits.
///
/// ```
/// use loopstack_core::secrets::bounded;
///
/// assert_eq!(bounded("short", 10), "short");
/// assert_eq!(bounded("naïve café", 4), "naïv… [truncated: 4 of 10 chars]");
/// ```
pub fn bounded(text: &str, max_chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max_chars) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => {
            let total = max_chars + text[cut..].chars().count();
            Cow::Owned(format!("{}… [truncated: {max_chars} of {total} chars]", &text[..cut]))
        }
    }
}

/// `raw` JSON with every secret in it redacted (a string's value, an object's key);
/// unchanged when it has none. The text is searched first: only JSON that holds a
/// secret is parsed and written again.
pub fn redact_raw(secrets: &Secrets, raw: Box<serde_json::value::RawValue>) -> Box<serde_json::value::RawValue> {
    if matches!(secrets.redact(raw.get()), Cow::Borrowed(_)) {
        return raw;
    }
    let Ok(mut value) = serde_json::from_str::<Value>(raw.get()) else { return raw };
    secrets.redact_value(&mut value);
    serde_json::value::to_raw_value(&value).unwrap_or(raw)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn redaction_table() {
        let secrets =
            Secrets::from_iter(["abcdef", "cdefgh", "secret", "secret-long", "ababab", "ключ-секрет", "🔑🔑🔑🔑"]);
        let table = [
            ("", ""),
            ("nothing here", "nothing here"),
            ("abcdef", "[redacted]"),
            ("xabcdefx", "x[redacted]x"),
            // Two secrets overlapping: one marker over both.
            ("abcdefgh", "[redacted]"),
            ("zzabcdefghzz", "zz[redacted]zz"),
            // One inside another.
            ("a secret-long one", "a [redacted] one"),
            ("secret secret", "[redacted] [redacted]"),
            // Touching occurrences stay two.
            ("secretsecret", "[redacted][redacted]"),
            // A secret overlapping itself.
            ("abababab", "[redacted]"),
            ("ababa", "ababa"),
            ("до ключ-секрет после", "до [redacted] после"),
            ("é🔑🔑🔑🔑é", "é[redacted]é"),
            ("🔑🔑🔑", "🔑🔑🔑"),
        ];
        for (text, expected) in table {
            assert_eq!(secrets.redact(text), expected, "{text:?}");
        }
        assert!(matches!(secrets.redact("nothing here"), Cow::Borrowed(_)));
        assert!(matches!(Secrets::new().redact("abcdef"), Cow::Borrowed(_)));
    }

    #[test]
    fn registration_rules() {
        let secrets = Secrets::new();
        assert!(!secrets.register(""));
        assert!(!secrets.register("   "));
        assert!(!secrets.register("abc"));
        assert!(!secrets.register("  abc\n"));
        assert!(secrets.register("ключ")); // four characters, eight bytes
        assert!(secrets.register("ключ"));
        assert!(secrets.register("\tkey-1\n"));
        assert_eq!(secrets.len(), 2);
        assert_eq!(secrets.redact("key-1 ключ abc"), "[redacted] [redacted] abc");
        assert!(Secrets::new().is_empty());
    }

    #[test]
    fn escaped_forms_are_found() {
        let secrets = Secrets::new().with(r#"pa"ss\word"#);
        let doc = serde_json::to_string(&json!({"error": r#"login pa"ss\word failed"#})).unwrap();
        let redacted = secrets.redact(&doc);
        assert_eq!(redacted, r#"{"error":"login [redacted] failed"}"#);
        assert_eq!(secrets.len(), 1);
    }

    #[test]
    fn values_are_redacted_everywhere() {
        let secrets = Secrets::new().with("tok_12345");
        let mut value = json!({
            "a": "tok_12345",
            "tok_12345": 1,
            "nested": [[{"b": "x tok_12345 y"}], true, null, 3],
        });
        assert!(secrets.redact_value(&mut value));
        assert_eq!(
            value,
            json!({"a": "[redacted]", "[redacted]": 1, "nested": [[{"b": "x [redacted] y"}], true, null, 3]})
        );
        assert!(!secrets.redact_value(&mut value));
        let mut deep = json!("tok_12345");
        for _ in 0..10_000 {
            deep = Value::Array(vec![deep]);
        }
        assert!(secrets.redact_value(&mut deep));
        // Dropping a value nested this deep recurses; take it apart from the outside.
        let mut items = vec![deep];
        while let Some(item) = items.pop() {
            if let Value::Array(inner) = item {
                items.extend(inner);
            } else {
                assert_eq!(item, json!("[redacted]"));
            }
        }
    }

    #[test]
    fn bounds() {
        assert_eq!(bounded("", 0), "");
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("abcd", 3), "abc… [truncated: 3 of 4 chars]");
        assert_eq!(bounded("abcd", 0), "… [truncated: 0 of 4 chars]");
        assert_eq!(bounded("🔑🔑🔑", 1), "🔑… [truncated: 1 of 3 chars]");
        assert_eq!(bounded("e\u{301}e\u{301}", 1), "e… [truncated: 1 of 4 chars]");
        assert!(matches!(bounded("abc", 99), Cow::Borrowed(_)));
    }

    #[test]
    fn redaction_comes_before_the_cut() {
        let secrets = Secrets::new().with("TOPSECRET");
        let text = "key=TOPSECRET";
        for max in 0..=text.len() + 1 {
            let out = secrets.redact_bounded(text, max);
            assert!(!out.contains("TOP"), "{max}: {out}");
        }
    }

    #[test]
    fn a_poisoned_lock_still_redacts() {
        let secrets = Secrets::new().with("abcdef");
        let clone = secrets.clone();
        let _ = std::thread::spawn(move || {
            let _guard = clone.inner.lock.write().unwrap();
            panic!("poison");
        })
        .join();
        assert_eq!(secrets.redact("abcdef"), "[redacted]");
        assert!(secrets.register("ghijkl"));
    }
}
