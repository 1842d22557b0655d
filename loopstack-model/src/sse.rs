//! The bounds of the providers' event streams ([`SSE_MAX_LINE_BYTES`],
//! [`SSE_MAX_EVENT_BYTES`]), and the Server-Sent Events parser that keeps them,
//! linear in its input and bounded in memory.
//!
//! Each byte is looked at once: a chunk is scanned for line ends from where the last
//! one stopped, never from the start of a buffered line. A line longer than
//! [`SSE_MAX_LINE_BYTES`], or an event whose data is larger than
//! [`SSE_MAX_EVENT_BYTES`], is an error, so no server can make the parser buffer
//! without bound. Fields other than `event` and `data` (`id`, `retry`) are not needed
//! by the providers and are ignored, as are comments; except `error`: llama.cpp's
//! server sends an error during a stream as a line `error: <json>` instead of an
//! `event: error` with `data: <json>`, so such a line is read as exactly that.

use std::fmt;

/// The longest line of an event stream a provider may send: 1 MiB. A longer line (a
/// server that never sends a newline, say) ends the stream with
/// [`LlmError::MalformedResponse`](crate::LlmError::MalformedResponse).
pub const SSE_MAX_LINE_BYTES: usize = 1 << 20;

/// The largest event of an event stream, its `data` lines together: 8 MiB. A larger
/// event ends the stream with
/// [`LlmError::MalformedResponse`](crate::LlmError::MalformedResponse).
pub const SSE_MAX_EVENT_BYTES: usize = 8 << 20;

/// Why an event stream cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SseError {
    /// A line is longer than the limit.
    LineTooLong(usize),
    /// An event's data is larger than the limit.
    EventTooLarge(usize),
    /// A line is not UTF-8.
    NotUtf8,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LineTooLong(limit) => {
                write!(f, "invalid event stream: a line is longer than the {} allowed", fmt_bytes(*limit))
            }
            Self::EventTooLarge(limit) => {
                write!(f, "invalid event stream: an event is larger than the {} allowed", fmt_bytes(*limit))
            }
            Self::NotUtf8 => f.write_str("invalid event stream: a line is not UTF-8"),
        }
    }
}

pub(crate) fn fmt_bytes(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// What stopped [`SseParser::feed`]: the stream, or the event handler.
#[derive(Debug)]
pub(crate) enum FeedError<E> {
    /// The stream broke a limit or is not UTF-8.
    Stream(SseError),
    /// The handler failed.
    Handler(E),
}

/// Parses an event stream fed in chunks of any size.
#[derive(Debug)]
pub(crate) struct SseParser {
    /// The start of a line whose end has not arrived.
    line: Vec<u8>,
    /// The last line ended in `\r`: a `\n` right after it belongs to that line end.
    after_cr: bool,
    /// A byte-order mark may still come (nothing was read yet).
    at_start: bool,
    /// The `event` field of the event being read.
    name: String,
    /// The `data` lines of the event being read, each followed by `\n`.
    data: String,
    max_line: usize,
    max_event: usize,
}

impl SseParser {
    /// A parser with the limits [`SSE_MAX_LINE_BYTES`] and [`SSE_MAX_EVENT_BYTES`].
    pub(crate) fn new() -> Self {
        Self::with_limits(SSE_MAX_LINE_BYTES, SSE_MAX_EVENT_BYTES)
    }

    /// A parser with other limits.
    pub(crate) fn with_limits(max_line: usize, max_event: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            name: String::new(),
            data: String::new(),
            max_line,
            max_event,
        }
    }

    /// Reads `chunk`, calling `on_event(name, data)` for each event it completes
    /// (`name` is `message` when the event has none). `on_event` returns whether to
    /// stop; then `feed` returns `Ok(true)` and the rest of the chunk is not read.
    pub(crate) fn feed<E>(
        &mut self,
        mut chunk: &[u8],
        on_event: &mut impl FnMut(&str, &str) -> Result<bool, E>,
    ) -> Result<bool, FeedError<E>> {
        while !chunk.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if chunk[0] == b'\n' {
                    chunk = &chunk[1..];
                    continue;
                }
            }
            let Some(end) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') else {
                self.check_line(chunk.len())?;
                self.line.extend_from_slice(chunk);
                return Ok(false);
            };
            self.check_line(end)?;
            self.after_cr = chunk[end] == b'\r';
            let stop = if self.line.is_empty() {
                self.line_done(&chunk[..end], on_event)?
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&chunk[..end]);
                let stop = self.line_done(&line, on_event);
                line.clear();
                self.line = line;
                stop?
            };
            if stop {
                return Ok(true);
            }
            chunk = &chunk[end + 1..];
        }
        Ok(false)
    }

    fn check_line<E>(&self, more: usize) -> Result<(), FeedError<E>> {
        if self.line.len() + more > self.max_line {
            return Err(FeedError::Stream(SseError::LineTooLong(self.max_line)));
        }
        Ok(())
    }

    fn line_done<E>(
        &mut self,
        mut line: &[u8],
        on_event: &mut impl FnMut(&str, &str) -> Result<bool, E>,
    ) -> Result<bool, FeedError<E>> {
        if std::mem::take(&mut self.at_start) {
            line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        }
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        let line = std::str::from_utf8(line).map_err(|_| FeedError::Stream(SseError::NotUtf8))?;
        let (field, value) = match line.split_once(':') {
            Some(("", _)) => return Ok(false), // a comment
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => self.push_data(value)?,
            "event" => self.set_name(value),
            // llama.cpp's `error: <json>`: an `error` event with this data.
            "error" => {
                self.set_name("error");
                self.push_data(value)?;
            }
            _ => {}
        }
        Ok(false)
    }

    fn set_name(&mut self, name: &str) {
        self.name.clear();
        self.name.push_str(name);
    }

    fn push_data<E>(&mut self, value: &str) -> Result<(), FeedError<E>> {
        if self.data.len() + value.len() + 1 > self.max_event {
            return Err(FeedError::Stream(SseError::EventTooLarge(self.max_event)));
        }
        self.data.push_str(value);
        self.data.push('\n');
        Ok(())
    }

    fn dispatch<E>(&mut self, on_event: &mut impl FnMut(&str, &str) -> Result<bool, E>) -> Result<bool, FeedError<E>> {
        if self.data.is_empty() {
            self.name.clear();
            return Ok(false);
        }
        self.data.pop(); // the `\n` after the last data line
        let name = if self.name.is_empty() { "message" } else { self.name.as_str() };
        let stop = on_event(name, &self.data).map_err(FeedError::Handler);
        self.name.clear();
        self.data.clear();
        stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events_of(parser: &mut SseParser, chunks: &[&[u8]]) -> Result<Vec<(String, String)>, SseError> {
        let mut events = Vec::new();
        for chunk in chunks {
            let result = parser.feed(chunk, &mut |name: &str, data: &str| {
                events.push((name.to_owned(), data.to_owned()));
                Ok::<_, ()>(false)
            });
            match result {
                Ok(_) => {}
                Err(FeedError::Stream(e)) => return Err(e),
                Err(FeedError::Handler(())) => unreachable!(),
            }
        }
        Ok(events)
    }

    fn pair(name: &str, data: &str) -> (String, String) {
        (name.to_owned(), data.to_owned())
    }

    const STREAM: &[u8] =
        "\u{feff}: a comment\r\nevent: ping\r\ndata: {}\r\n\r\ndata:one\ndata:  two\nid: 7\nretry: 10\n\n\
         event: empty\n\ndata\n\ndata: é ☀️\r\rdata: [DONE]\n\npartial: never dispatched\ndata: x"
            .as_bytes();

    #[test]
    fn parses_fields_line_ends_and_comments() {
        let want = vec![
            pair("ping", "{}"),
            pair("message", "one\n two"),
            pair("message", ""),
            pair("message", "é ☀️"),
            pair("message", "[DONE]"),
        ];
        assert_eq!(events_of(&mut SseParser::new(), &[STREAM]).unwrap(), want);
        // Split at every byte, `\r\n` and UTF-8 sequences included: the same events.
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(events_of(&mut SseParser::new(), &bytes).unwrap(), want);
        for cut in 0..STREAM.len() {
            let (a, b) = STREAM.split_at(cut);
            assert_eq!(events_of(&mut SseParser::new(), &[a, b]).unwrap(), want, "cut at {cut}");
        }
    }

    #[test]
    fn the_handler_stops_the_feed() {
        let mut parser = SseParser::new();
        let mut seen = Vec::new();
        let stopped = parser
            .feed(b"data: a\n\ndata: b\n\n", &mut |_: &str, data: &str| {
                seen.push(data.to_owned());
                Ok::<_, ()>(true)
            })
            .unwrap();
        assert!(stopped);
        assert_eq!(seen, ["a"]);
        let failed = parser.feed(b"data: c\n\n", &mut |_: &str, _: &str| Err::<bool, _>("no"));
        assert!(matches!(failed, Err(FeedError::Handler("no"))));
    }

    #[test]
    fn lines_and_events_are_bounded() {
        // A line without end is refused once it passes the limit, however it arrives.
        let mut parser = SseParser::with_limits(16, 64);
        assert_eq!(events_of(&mut parser, &[b"data: 0123456789"]).unwrap(), []);
        assert_eq!(events_of(&mut parser, &[b"a"]), Err(SseError::LineTooLong(16)));
        let mut parser = SseParser::with_limits(16, 64);
        assert_eq!(events_of(&mut parser, &[b"data: 0123456789abc\n"]), Err(SseError::LineTooLong(16)));
        // A line of exactly the limit is fine.
        let mut parser = SseParser::with_limits(16, 64);
        assert_eq!(events_of(&mut parser, &[b"data: 0123456789\n\n"]).unwrap(), [pair("message", "0123456789")]);
        // Data lines that never end their event.
        let mut parser = SseParser::with_limits(16, 64);
        let line: &[u8] = b"data: 0123456789\n";
        assert_eq!(events_of(&mut parser, &[line; 5]).unwrap(), []);
        assert_eq!(events_of(&mut parser, &[line]), Err(SseError::EventTooLarge(64)));
        assert_eq!(
            SseError::LineTooLong(SSE_MAX_LINE_BYTES).to_string(),
            "invalid event stream: a line is longer than the 1 MiB allowed"
        );
        assert_eq!(
            SseError::EventTooLarge(SSE_MAX_EVENT_BYTES).to_string(),
            "invalid event stream: an event is larger than the 8 MiB allowed"
        );
    }

    #[test]
    fn an_error_field_is_an_error_event() {
        let stream: &[u8] = b"data: {\"a\": 1}\n\nerror: {\"code\": 500}\n\ndata: [DONE]\n\n";
        assert_eq!(
            events_of(&mut SseParser::new(), &[stream]).unwrap(),
            [pair("message", "{\"a\": 1}"), pair("error", "{\"code\": 500}"), pair("message", "[DONE]")]
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_is_an_error() {
        assert_eq!(events_of(&mut SseParser::new(), &[b"data: \xff\n\n"]), Err(SseError::NotUtf8));
    }
}
