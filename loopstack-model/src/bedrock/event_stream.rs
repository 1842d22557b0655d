//! The AWS event-stream framing of ConverseStream's body
//! (`application/vnd.amazon.eventstream`): binary messages, each
//!
//! ```text
//! total length   u32, big-endian: the whole message, these 4 bytes and the last CRC included
//! headers length u32
//! prelude CRC    u32: CRC32 of the 8 bytes above
//! headers        name length u8, name, value type u8, value (strings: u16 length, bytes)
//! payload        total length - headers length - 16 bytes (for Bedrock, one JSON object)
//! message CRC    u32: CRC32 of everything before it
//! ```
//!
//! Written here rather than taken from `aws-smithy-eventstream`: that crate is a 0.x
//! runtime piece of the AWS SDK, released in lockstep with `aws-smithy-types` and with
//! its own fixed limits and error types, while the framing is a page of code. This
//! decoder is linear in its input, keeps at most one message
//! ([`EVENT_STREAM_MAX_MESSAGE_BYTES`]) buffered, refuses an oversized length as soon
//! as the prelude announcing it arrives, and checks both CRCs.

use std::fmt;

/// The largest event-stream message accepted: 16 MiB, the limit of the AWS
/// event-stream format (a Bedrock event is a small JSON object). A prelude announcing
/// a larger one ends the stream with
/// [`LlmError::MalformedResponse`](crate::LlmError::MalformedResponse) before anything
/// more is buffered.
pub const EVENT_STREAM_MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The prelude: total length, headers length, prelude CRC.
const PRELUDE: usize = 12;
/// The prelude and the message CRC: the smallest message.
const OVERHEAD: usize = PRELUDE + 4;

/// One decoded message: its string headers and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    /// The headers whose values are strings (type 7), in order; headers of other
    /// types are read over and left out.
    pub(crate) headers: Vec<(String, String)>,
    /// The payload.
    pub(crate) payload: Vec<u8>,
}

impl Frame {
    /// The value of a string header.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Why an event stream cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// A prelude announces a message larger than the limit.
    TooLarge(u64),
    /// A prelude announces a message too short for its prelude, headers and CRC.
    BadLengths {
        /// The total length announced.
        total: u32,
        /// The headers length announced.
        headers: u32,
    },
    /// The prelude's CRC does not match.
    PreludeCrc,
    /// The message's CRC does not match.
    MessageCrc,
    /// The headers do not parse.
    BadHeaders(&'static str),
    /// The body ended inside a message.
    Truncated(usize),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid event stream: ")?;
        match self {
            Self::TooLarge(n) => write!(
                f,
                "a message of {n} bytes is larger than the {} MiB allowed",
                EVENT_STREAM_MAX_MESSAGE_BYTES >> 20
            ),
            Self::BadLengths { total, headers } => {
                write!(f, "a message of {total} bytes cannot hold {headers} bytes of headers")
            }
            Self::PreludeCrc => f.write_str("a message's prelude checksum does not match"),
            Self::MessageCrc => f.write_str("a message's checksum does not match"),
            Self::BadHeaders(why) => write!(f, "a message's headers are malformed: {why}"),
            Self::Truncated(n) => write!(f, "the body ended inside a message ({n} bytes of it arrived)"),
        }
    }
}

/// Decodes event-stream messages from a body fed in chunks of any size.
#[derive(Debug, Default)]
pub(crate) struct FrameDecoder {
    /// Bytes of messages not decoded yet (at most one message and a prelude).
    buf: Vec<u8>,
    /// The checked total length of the message at the start of `buf`, once its
    /// prelude arrived.
    total: Option<usize>,
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

impl FrameDecoder {
    /// A decoder at the start of a body.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk of the body and calls `each` with every message it completes, in
    /// order, until `each` returns `Ok(true)` (enough was read) or fails. Returns
    /// whether `each` said enough.
    pub(crate) fn feed<E>(
        &mut self,
        mut chunk: &[u8],
        each: &mut dyn FnMut(Frame) -> Result<bool, E>,
    ) -> Result<bool, FeedError<E>> {
        while !chunk.is_empty() {
            // Take no more than the current message needs, so the buffer never holds
            // more than one message.
            let want = match self.total {
                Some(total) => total - self.buf.len(),
                None => PRELUDE - self.buf.len(),
            };
            let (now, rest) = chunk.split_at(want.min(chunk.len()));
            self.buf.extend_from_slice(now);
            chunk = rest;
            if self.total.is_none() {
                if self.buf.len() < PRELUDE {
                    continue;
                }
                self.total = Some(check_prelude(&self.buf).map_err(FeedError::Stream)?);
                self.buf.reserve_exact(self.total.unwrap_or(0) - PRELUDE);
            }
            if Some(self.buf.len()) == self.total {
                let frame = decode_message(&self.buf).map_err(FeedError::Stream)?;
                self.buf.clear();
                self.total = None;
                if each(frame).map_err(FeedError::Handler)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Checks that the body did not end inside a message.
    pub(crate) fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() { Ok(()) } else { Err(FrameError::Truncated(self.buf.len())) }
    }
}

/// What stopped [`FrameDecoder::feed`]: the stream, or the message handler.
#[derive(Debug)]
pub(crate) enum FeedError<E> {
    /// The stream is malformed.
    Stream(FrameError),
    /// The handler failed.
    Handler(E),
}

/// The total length a prelude announces, checked against its CRC and the limits.
fn check_prelude(prelude: &[u8]) -> Result<usize, FrameError> {
    let (total, headers) = (be_u32(&prelude[0..4]), be_u32(&prelude[4..8]));
    if crc32fast::hash(&prelude[..8]) != be_u32(&prelude[8..12]) {
        return Err(FrameError::PreludeCrc);
    }
    let total_bytes = usize::try_from(total).unwrap_or(usize::MAX);
    if total_bytes > EVENT_STREAM_MAX_MESSAGE_BYTES {
        return Err(FrameError::TooLarge(u64::from(total)));
    }
    if u64::from(total) < OVERHEAD as u64 + u64::from(headers) {
        return Err(FrameError::BadLengths { total, headers });
    }
    Ok(total_bytes)
}

/// Decodes one whole message (its prelude already checked).
fn decode_message(message: &[u8]) -> Result<Frame, FrameError> {
    let crc_at = message.len() - 4;
    if crc32fast::hash(&message[..crc_at]) != be_u32(&message[crc_at..]) {
        return Err(FrameError::MessageCrc);
    }
    let headers_len = be_u32(&message[4..8]) as usize;
    let headers = decode_headers(&message[PRELUDE..PRELUDE + headers_len])?;
    Ok(Frame { headers, payload: message[PRELUDE + headers_len..crc_at].to_vec() })
}

fn decode_headers(mut bytes: &[u8]) -> Result<Vec<(String, String)>, FrameError> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], FrameError> {
        if bytes.len() < n {
            return Err(FrameError::BadHeaders("a header runs past the headers' end"));
        }
        let (head, tail) = bytes.split_at(n);
        *bytes = tail;
        Ok(head)
    }
    let mut headers = Vec::new();
    while !bytes.is_empty() {
        let name_len = usize::from(take(&mut bytes, 1)?[0]);
        let name = std::str::from_utf8(take(&mut bytes, name_len)?)
            .map_err(|_| FrameError::BadHeaders("a header's name is not UTF-8"))?
            .to_owned();
        let value_type = take(&mut bytes, 1)?[0];
        let fixed = match value_type {
            0 | 1 => 0, // true, false
            2 => 1,     // byte
            3 => 2,     // short
            4 => 4,     // integer
            5 | 8 => 8, // long, timestamp
            9 => 16,    // UUID
            6 | 7 => {
                // Bytes, string: a u16 length first.
                let len = take(&mut bytes, 2)?;
                let value = take(&mut bytes, usize::from(u16::from_be_bytes([len[0], len[1]])))?;
                if value_type == 7 {
                    let value = std::str::from_utf8(value)
                        .map_err(|_| FrameError::BadHeaders("a string header is not UTF-8"))?;
                    headers.push((name, value.to_owned()));
                }
                continue;
            }
            _ => return Err(FrameError::BadHeaders("a header has an unknown value type")),
        };
        take(&mut bytes, fixed)?;
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message with string headers (an independent encoder of the published format).
    fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        let mut head = Vec::new();
        for (name, value) in headers {
            head.push(u8::try_from(name.len()).unwrap());
            head.extend_from_slice(name.as_bytes());
            head.push(7);
            head.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
            head.extend_from_slice(value.as_bytes());
        }
        let total = u32::try_from(OVERHEAD + head.len() + payload.len()).unwrap();
        let mut out = Vec::new();
        out.extend_from_slice(&total.to_be_bytes());
        out.extend_from_slice(&u32::try_from(head.len()).unwrap().to_be_bytes());
        out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(payload);
        out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
        out
    }

    fn decode_all(body: &[u8], piece: usize) -> Result<Vec<Frame>, FrameError> {
        let mut decoder = FrameDecoder::new();
        let mut frames = Vec::new();
        for chunk in body.chunks(piece) {
            decoder
                .feed::<()>(chunk, &mut |frame| {
                    frames.push(frame);
                    Ok(false)
                })
                .map_err(|e| match e {
                    FeedError::Stream(e) => e,
                    FeedError::Handler(()) => unreachable!(),
                })?;
        }
        decoder.finish()?;
        Ok(frames)
    }

    #[test]
    fn decodes_messages_fed_in_any_pieces() {
        let mut body =
            encode(&[(":event-type", "messageStart"), (":message-type", "event")], br#"{"role":"assistant"}"#);
        body.extend(encode(&[], b""));
        body.extend(encode(&[(":event-type", "contentBlockDelta")], "{\"t\":\"é\"}".as_bytes()));
        for piece in [1, 2, 5, 12, 13, 1000] {
            let frames = decode_all(&body, piece).unwrap();
            assert_eq!(frames.len(), 3);
            assert_eq!(frames[0].header(":event-type"), Some("messageStart"));
            assert_eq!(frames[0].header(":message-type"), Some("event"));
            assert_eq!(frames[0].payload, br#"{"role":"assistant"}"#);
            assert_eq!(frames[1], Frame { headers: vec![], payload: vec![] });
            assert_eq!(frames[2].payload, "{\"t\":\"é\"}".as_bytes());
        }
    }

    #[test]
    fn headers_of_every_type_are_read_over() {
        // bool true, bool false, byte, short, int, long, bytes, timestamp, uuid, string.
        let mut head = Vec::new();
        let mut add = |name: &str, kind: u8, value: &[u8]| {
            head.push(u8::try_from(name.len()).unwrap());
            head.extend_from_slice(name.as_bytes());
            head.push(kind);
            head.extend_from_slice(value);
        };
        add("t", 0, &[]);
        add("f", 1, &[]);
        add("b", 2, &[7]);
        add("s", 3, &[0, 7]);
        add("i", 4, &[0, 0, 0, 7]);
        add("l", 5, &[0; 8]);
        add("y", 6, &[0, 2, 0xff, 0xfe]);
        add("d", 8, &[0; 8]);
        add("u", 9, &[0; 16]);
        add("k", 7, &[0, 2, b'o', b'k']);
        let total = u32::try_from(OVERHEAD + head.len() + 2).unwrap();
        let mut msg = total.to_be_bytes().to_vec();
        msg.extend_from_slice(&u32::try_from(head.len()).unwrap().to_be_bytes());
        msg.extend_from_slice(&crc32fast::hash(&msg).to_be_bytes());
        msg.extend_from_slice(&head);
        msg.extend_from_slice(b"{}");
        msg.extend_from_slice(&crc32fast::hash(&msg).to_be_bytes());
        let frames = decode_all(&msg, 3).unwrap();
        assert_eq!(frames[0].headers, vec![("k".to_owned(), "ok".to_owned())]);
        assert_eq!(frames[0].payload, b"{}");
    }

    #[test]
    fn corrupt_truncated_and_oversized_messages_are_errors() {
        let good = encode(&[(":event-type", "messageStop")], br#"{"stopReason":"end_turn"}"#);
        let mut bad_prelude = good.clone();
        bad_prelude[9] ^= 1;
        assert_eq!(decode_all(&bad_prelude, 4), Err(FrameError::PreludeCrc));
        let mut bad_payload = good.clone();
        let at = bad_payload.len() - 6;
        bad_payload[at] ^= 0x20;
        assert_eq!(decode_all(&bad_payload, 4), Err(FrameError::MessageCrc));
        let mut bad_crc = good.clone();
        *bad_crc.last_mut().unwrap() ^= 1;
        assert_eq!(decode_all(&bad_crc, 100), Err(FrameError::MessageCrc));
        assert_eq!(decode_all(&good[..good.len() - 1], 7), Err(FrameError::Truncated(good.len() - 1)));
        assert_eq!(decode_all(&good[..5], 7), Err(FrameError::Truncated(5)));

        // A prelude announcing 4 GiB is refused at once, before anything is buffered.
        let mut huge = u32::MAX.to_be_bytes().to_vec();
        huge.extend_from_slice(&0u32.to_be_bytes());
        huge.extend_from_slice(&crc32fast::hash(&huge).to_be_bytes());
        assert_eq!(decode_all(&huge, 12), Err(FrameError::TooLarge(u64::from(u32::MAX))));
        let mut decoder = FrameDecoder::new();
        assert!(decoder.feed::<()>(&huge, &mut |_| Ok(false)).is_err());
        assert!(decoder.buf.capacity() < 1024);

        // Lengths that cannot hold the prelude, the headers and the CRC.
        for (total, headers) in [(15u32, 0u32), (20, 8), (16, u32::MAX)] {
            let mut prelude = total.to_be_bytes().to_vec();
            prelude.extend_from_slice(&headers.to_be_bytes());
            prelude.extend_from_slice(&crc32fast::hash(&prelude).to_be_bytes());
            assert_eq!(decode_all(&prelude, 12), Err(FrameError::BadLengths { total, headers }));
        }

        // A header running past the headers' end, and an unknown value type.
        let mut msg = encode(&[("abc", "value")], b"");
        msg[12] = 200; // the name's length
        let n = msg.len() - 4;
        let crc = crc32fast::hash(&msg[..n]).to_be_bytes();
        msg[n..].copy_from_slice(&crc);
        assert!(matches!(decode_all(&msg, 64), Err(FrameError::BadHeaders(_))));
        let mut msg = encode(&[("abc", "value")], b"");
        msg[16] = 42; // the value type
        let n = msg.len() - 4;
        let crc = crc32fast::hash(&msg[..n]).to_be_bytes();
        msg[n..].copy_from_slice(&crc);
        assert_eq!(decode_all(&msg, 64), Err(FrameError::BadHeaders("a header has an unknown value type")));
        assert!(FrameError::TooLarge(1 << 30).to_string().contains("16 MiB"));
    }

    #[test]
    fn a_handler_that_says_enough_stops_the_feed() {
        let mut body = encode(&[], b"1");
        body.extend(encode(&[], b"2"));
        let mut decoder = FrameDecoder::new();
        let mut seen = Vec::new();
        let done = decoder
            .feed::<()>(&body, &mut |frame| {
                seen.push(frame.payload);
                Ok(true)
            })
            .unwrap();
        assert!(done);
        assert_eq!(seen, vec![b"1".to_vec()]);
    }
}
