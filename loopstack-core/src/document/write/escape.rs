//! Strings as serde_json writes them: a look for a byte to escape eight bytes at a
//! time, and the escapes themselves.

use std::fmt::{self, Display};

/// Whether serde_json escapes this byte in a string: control characters, the quote
/// and the backslash.
const ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Whether any of the eight bytes of `word` needs an escape, all at once: a byte
/// below 0x20, or equal to the quote or the backslash, sets its high bit in one of
/// the three masks (the standard "has less" and "has zero" tests, each exact as to
/// whether some byte does).
#[inline]
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & HIGH != 0
}

/// `chunk`, eight bytes, as one word.
#[inline]
fn word(chunk: &[u8]) -> u64 {
    u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]))
}

/// Whether no byte of `bytes` needs an escape. Most strings written are short
/// (keys, ids, tags): one of up to sixteen bytes is checked as two words that may
/// overlap (four to seven bytes: two half words), one shorter than four a byte at a
/// time; a longer one eight bytes at a time, out of line.
#[inline(always)]
fn is_plain(bytes: &[u8]) -> bool {
    let half = |chunk: &[u8]| u64::from(u32::from_ne_bytes(chunk.try_into().unwrap_or([0; 4])));
    let len = bytes.len();
    if len < 4 {
        return !bytes.iter().any(|&b| ESCAPE[usize::from(b)]);
    }
    if len < 8 {
        return !word_needs_escape(half(&bytes[..4]) | half(&bytes[len - 4..]) << 32);
    }
    if len <= 16 {
        return !(word_needs_escape(word(&bytes[..8])) | word_needs_escape(word(&bytes[len - 8..])));
    }
    is_plain_long(bytes)
}

/// [`is_plain`] of a string longer than sixteen bytes: eight bytes at a time, the
/// last eight overlapping the ones before.
#[inline(never)]
fn is_plain_long(bytes: &[u8]) -> bool {
    let mut chunks = bytes.chunks_exact(8);
    if chunks.any(|chunk| word_needs_escape(word(chunk))) {
        return false;
    }
    !word_needs_escape(word(&bytes[bytes.len() - 8..]))
}

/// `s`'s characters as a JSON string holds them, without the quotes: serde_json's
/// escapes (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, and `\u00xx` for the other
/// control characters).
#[inline(always)]
fn write_str_contents(out: &mut String, s: &str) {
    if is_plain(s.as_bytes()) {
        out.push_str(s);
    } else {
        write_escaped(out, s);
    }
}

/// [`write_str_contents`] of a string that needs an escape: out of line, so that
/// the plain case saves no registers for it.
#[cold]
#[inline(never)]
fn write_escaped(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !ESCAPE[usize::from(b)] {
            continue;
        }
        // The escaped bytes are ASCII: `start..i` is on character boundaries.
        out.push_str(&s[start..i]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            control => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(control >> 4)]));
                out.push(char::from(HEX[usize::from(control & 0xf)]));
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// `text`, a literal of serde's derived code (a field or variant name), as a JSON
/// string followed by `after` (the colon after a key). Inlined there, so the check
/// for a byte to escape and the copy fold to a few stores of known bytes.
#[inline(always)]
pub(super) fn write_literal(out: &mut String, text: &str, after: &str) {
    if is_plain(text.as_bytes()) {
        out.reserve(text.len() + 2 + after.len());
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        write_str(out, text);
    }
    out.push_str(after);
}

/// `s` as a JSON string.
pub(super) fn write_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    write_str_contents(out, s);
    out.push('"');
}

/// A `Display`'s text as a JSON string, escaped as it is formatted.
pub(super) fn write_display<T: Display + ?Sized>(out: &mut String, value: &T) {
    struct Escaping<'a>(&'a mut String);
    impl fmt::Write for Escaping<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            write_str_contents(self.0, s);
            Ok(())
        }
    }
    out.push('"');
    // Writing into a `String` does not fail; a `Display` impl that does is a bug of its own.
    let _ = fmt::write(&mut Escaping(out), format_args!("{value}"));
    out.push('"');
}
