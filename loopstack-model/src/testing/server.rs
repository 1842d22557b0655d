//! A local HTTP server that imitates a provider's API in tests.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// How a reply is sent.
#[derive(Debug, Clone)]
enum Mode {
    /// The whole body at once, with `Content-Length`.
    Whole,
    /// The body in chunked transfer encoding, in pieces of these sizes (cycled), each
    /// flushed on its own. The client's HTTP stack hands each chunk over separately.
    Pieces(Vec<usize>),
    /// The body as one chunk, then no end of the body: the connection stays silent.
    Hang,
    /// Reads the request and never answers (until the client hangs up).
    Stall,
    /// Closes the connection without answering.
    Close,
    /// Announces a longer body than it sends, then closes the connection.
    Truncate,
    /// The body, in chunked transfer encoding, sent again and again until the client
    /// hangs up: a body without end.
    Endless,
}

/// One scripted reply.
#[derive(Debug, Clone)]
#[must_use]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    mode: Mode,
}

impl Reply {
    /// A JSON reply.
    pub fn json(status: u16, body: Value) -> Self {
        Self::raw(status, "application/json", body.to_string())
    }

    /// A reply with this content type and body.
    pub fn raw(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.into(),
            mode: Mode::Whole,
        }
    }

    /// A 200 event stream.
    pub fn sse(body: impl Into<String>) -> Self {
        Self::raw(200, "text/event-stream", body.into())
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sends the body in chunks of these sizes, cycled.
    ///
    /// # Panics
    /// If a size is zero.
    pub fn pieces(mut self, sizes: &[usize]) -> Self {
        assert!(sizes.iter().all(|&s| s > 0), "a piece of a body is at least one byte");
        self.mode = Mode::Pieces(sizes.to_vec());
        self
    }

    /// Sends the head and the body, then never ends the body (stays silent).
    pub fn then_hang(mut self) -> Self {
        self.mode = Mode::Hang;
        self
    }

    /// Sends the head and part of the body, then closes the connection.
    pub fn truncated(mut self) -> Self {
        self.mode = Mode::Truncate;
        self
    }

    /// Sends the head, then `body` as a chunk again and again, never ending the body,
    /// until the client hangs up.
    ///
    /// # Panics
    /// If the body is empty.
    pub fn endless(mut self) -> Self {
        assert!(!self.body.is_empty(), "an endless body repeats a chunk of at least one byte");
        self.mode = Mode::Endless;
        self
    }

    /// Never answers.
    pub fn stall() -> Self {
        Self { status: 0, headers: Vec::new(), body: Vec::new(), mode: Mode::Stall }
    }

    /// Closes the connection without answering.
    pub fn close() -> Self {
        Self { status: 0, headers: Vec::new(), body: Vec::new(), mode: Mode::Close }
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Request {
    /// The method, such as `POST`.
    pub method: String,
    /// The path with its query string, as sent (`/v1/chat/completions?x=1`).
    pub path: String,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The body's bytes, as sent.
    pub raw_body: Vec<u8>,
}

impl Request {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// Answers a request: an imitation of an API.
type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

struct State {
    script: Mutex<VecDeque<Reply>>,
    handler: Option<Box<Handler>>,
    requests: Mutex<Vec<Request>>,
    /// How many replies that wait for the client ([`Reply::stall`],
    /// [`Reply::then_hang`], [`Reply::endless`]) ended because it hung up.
    hangups: tokio::sync::watch::Sender<usize>,
}

impl State {
    fn new(script: VecDeque<Reply>, handler: Option<Box<Handler>>) -> Self {
        Self {
            script: Mutex::new(script),
            handler,
            requests: Mutex::default(),
            hangups: tokio::sync::watch::channel(0).0,
        }
    }
}

/// A local HTTP/1.1 server for tests of a provider: it answers each request with
/// the next reply of a script ([`Server::start`]) or with what a handler computes
/// from the request ([`Server::handle`], an imitation of the API), and records every
/// request. It runs on the test's Tokio runtime and stops with it.
pub struct Server {
    /// The address it listens on (loopback, a free port).
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl Server {
    /// Starts a server answering with `script`, in order. Requests beyond the script get
    /// a 418 (not retried by the clients) saying so.
    pub async fn start(script: Vec<Reply>) -> Self {
        Self::spawn(State::new(script.into(), None)).await
    }

    /// Starts a server answering each request with `handler`'s reply: an imitation
    /// of an API, which checks the request and answers in the API's shapes.
    pub async fn handle(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        Self::spawn(State::new(VecDeque::new(), Some(Box::new(handler)))).await
    }

    async fn spawn(state: State) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the test server");
        let addr = listener.local_addr().expect("a bound listener has an address");
        let state = Arc::new(state);
        let accepting = state.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, accepting.clone()));
            }
        });
        Self { addr, state }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// How many replies of the script were not used.
    pub fn unused_replies(&self) -> usize {
        self.state.script.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// How many times the client hung up on a reply that waited for it to
    /// ([`Reply::stall`], [`Reply::then_hang`], [`Reply::endless`]).
    pub fn hangups(&self) -> usize {
        *self.state.hangups.borrow()
    }

    /// Waits until the client has hung up on `n` replies that waited for it (see
    /// [`Server::hangups`]), for at most `limit`; `false` if it had not by then.
    pub async fn hung_up(&self, n: usize, limit: std::time::Duration) -> bool {
        let mut hangups = self.state.hangups.subscribe();
        tokio::time::timeout(limit, hangups.wait_for(|&seen| seen >= n)).await.is_ok_and(|r| r.is_ok())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Serves the requests of one connection (keep-alive) until it closes.
async fn serve(mut socket: TcpStream, state: Arc<State>) {
    socket.set_nodelay(true).ok();
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            match socket.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap_or_default().split(' ');
        let method = request_line.next().unwrap_or_default().to_owned();
        let path = request_line.next().unwrap_or_default().to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        let length = headers
            .iter()
            .find(|(name, _)| name == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match socket.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        let body_bytes: Vec<u8> = buf.drain(..head_end + length).skip(head_end).collect();
        let body = serde_json::from_slice(&body_bytes).unwrap_or(Value::Null);
        let request = Request { method, path, headers, body, raw_body: body_bytes };
        let reply = match &state.handler {
            Some(handler) => Some(handler(&request)),
            None => state.script.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front(),
        };
        state.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(request);
        let reply = reply.unwrap_or_else(|| Reply::raw(418, "text/plain", "test server: no scripted reply left"));
        let waits = matches!(reply.mode, Mode::Stall | Mode::Hang | Mode::Endless);
        if write_reply(&mut socket, reply).await.is_err() {
            if waits {
                state.hangups.send_modify(|n| *n += 1);
            }
            return;
        }
    }
}

/// Writes a reply; `Err` when the connection is to be (or was) closed.
async fn write_reply(socket: &mut TcpStream, reply: Reply) -> std::io::Result<()> {
    let stop = || Err(std::io::Error::other("closed"));
    match &reply.mode {
        Mode::Close => return stop(),
        Mode::Stall => {
            let mut sink = [0u8; 1024];
            while socket.read(&mut sink).await? > 0 {}
            return stop();
        }
        Mode::Whole | Mode::Pieces(_) | Mode::Hang | Mode::Truncate | Mode::Endless => {}
    }
    let mut head = format!("HTTP/1.1 {} Test\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match &reply.mode {
        Mode::Pieces(_) | Mode::Hang | Mode::Endless => head.push_str("transfer-encoding: chunked\r\n\r\n"),
        Mode::Truncate => head.push_str(&format!("content-length: {}\r\n\r\n", reply.body.len() + 100)),
        _ => head.push_str(&format!("content-length: {}\r\n\r\n", reply.body.len())),
    }
    socket.write_all(head.as_bytes()).await?;
    match &reply.mode {
        Mode::Pieces(sizes) => {
            let mut rest = &reply.body[..];
            for &size in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (piece, tail) = rest.split_at(size.min(rest.len()));
                socket.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).await?;
                socket.write_all(piece).await?;
                socket.write_all(b"\r\n").await?;
                socket.flush().await?;
                rest = tail;
            }
            socket.write_all(b"0\r\n\r\n").await?;
        }
        Mode::Hang => {
            // An empty chunk would end the body.
            if !reply.body.is_empty() {
                socket.write_all(format!("{:x}\r\n", reply.body.len()).as_bytes()).await?;
                socket.write_all(&reply.body).await?;
                socket.write_all(b"\r\n").await?;
            }
            socket.flush().await?;
            let mut sink = [0u8; 1024];
            while socket.read(&mut sink).await? > 0 {}
            return Err(std::io::Error::other("closed"));
        }
        Mode::Endless => {
            let mut chunk = format!("{:x}\r\n", reply.body.len()).into_bytes();
            chunk.extend_from_slice(&reply.body);
            chunk.extend_from_slice(b"\r\n");
            // Until a write fails: the client hung up. Yielding between writes lets the
            // client (on the same runtime) read.
            loop {
                socket.write_all(&chunk).await?;
                socket.flush().await?;
                tokio::task::yield_now().await;
            }
        }
        Mode::Truncate => {
            socket.write_all(&reply.body).await?;
            socket.flush().await?;
            return Err(std::io::Error::other("closed"));
        }
        _ => socket.write_all(&reply.body).await?,
    }
    socket.flush().await
}
