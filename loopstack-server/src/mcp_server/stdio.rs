//! MCP over stdio: one JSON-RPC message a line, each way.
//!
//! rmcp's stdio transport skips a line that is not JSON without a word (as the
//! other official SDKs do, lest two peers that echo errors answer each other
//! forever), and answers JSON that is not a message with an error whose id is
//! lost. JSON-RPC 2.0 wants an answer to each: `-32700` for a line that is not
//! JSON, `-32600` for JSON that is not a message, with its id when it has one; a
//! client then learns what went wrong instead of waiting. The answers are valid
//! messages, which are never answered, so a peer that echoes them back cannot start
//! a loop. This transport reads the lines itself to answer them so, and otherwise
//! does what rmcp's does.

use std::sync::Arc;

use loopstack_core::serde_json::{self, Value, json};
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::Mutex;

/// A server's transport over a line reader (stdin) and writer (stdout).
pub(super) struct LineTransport<R, W> {
    reader: BufReader<R>,
    /// Shared with each send's future, which must own what it writes to.
    writer: Arc<Mutex<W>>,
    line: Vec<u8>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LineTransport<R, W> {
    pub(super) fn new(reader: R, writer: W) -> Self {
        Self { reader: BufReader::new(reader), writer: Arc::new(Mutex::new(writer)), line: Vec::new() }
    }

    /// The next message the client sent, answering the lines that are none on the
    /// way; `None` when its input ended.
    async fn next_message(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            self.line.clear();
            match self.reader.read_until(b'\n', &mut self.line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let line = self.line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            let answer = match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
                Ok(message) => return Some(message),
                Err(e) => refusal(line, &e),
            };
            if let Some(answer) = answer
                && write_line(&self.writer, serde_json::to_vec(&answer)).await.is_err()
            {
                return None;
            }
        }
    }
}

/// The JSON-RPC error that answers a line that is not a message: `None` for a
/// notification (a message without an id), which is never answered.
fn refusal(line: &[u8], why: &serde_json::Error) -> Option<Value> {
    let (code, id, message) = match serde_json::from_slice::<Value>(line) {
        Err(e) => (ErrorCode::PARSE_ERROR, Value::Null, format!("Parse error: the line is not JSON: {e}")),
        Ok(value) => {
            if value.get("method").is_some() && value.get("id").is_none() {
                return None;
            }
            // The id is echoed when it is one a request may have.
            let id = value.get("id").filter(|id| id.is_string() || id.is_number()).cloned().unwrap_or(Value::Null);
            (ErrorCode::INVALID_REQUEST, id, format!("Invalid Request: not a JSON-RPC 2.0 message of MCP: {why}"))
        }
    };
    Some(json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code.0, "message": message } }))
}

/// Writes a message, serialized (or why it could not be), and a line break, and flushes.
async fn write_line<W: AsyncWrite + Unpin>(
    writer: &Mutex<W>,
    message: serde_json::Result<Vec<u8>>,
) -> std::io::Result<()> {
    let mut line = message?;
    line.push(b'\n');
    let mut writer = writer.lock().await;
    writer.write_all(&line).await?;
    writer.flush().await
}

impl<R, W> rmcp::transport::Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = Arc::clone(&self.writer);
        let message = serde_json::to_vec(&item);
        async move { write_line(&writer, message).await }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.next_message()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ClientRequest, JsonRpcMessage};

    use super::*;

    #[tokio::test]
    async fn a_line_that_is_no_message_is_answered_and_the_next_one_read() {
        let input = concat!(
            "{not json\n",
            "\n",
            "[1, 2]\n",
            "{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": \"tools/call\", \"params\": 3}\n",
            "{\"jsonrpc\": \"1.0\", \"method\": \"notifications/initialized\"}\n",
            "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"initialize\", \"params\": {\"protocolVersion\": \"\", ",
            "\"capabilities\": {}, \"clientInfo\": {\"name\": \"c\", \"version\": \"1\"}}}\r\n",
        );
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (answers, sink) = tokio::io::duplex(1 << 16);
        client.write_all(input.as_bytes()).await.unwrap();
        drop(client);
        let mut transport = LineTransport::new(server, sink);
        // The lines before it are answered, and it is passed on as it is (the
        // handshake answers the version it asks for).
        let message = transport.next_message().await.expect("the initialize request");
        let JsonRpcMessage::Request(request) = message else { panic!("{message:?}") };
        let ClientRequest::InitializeRequest(init) = request.request else { panic!("{:?}", request.request) };
        assert_eq!(init.params.protocol_version.as_str(), "");
        assert!(transport.next_message().await.is_none(), "the input ended");

        drop(transport);
        let mut lines = BufReader::new(answers).lines();
        let mut codes = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            let answer: Value = serde_json::from_str(&line).unwrap();
            codes.push((answer["error"]["code"].as_i64().unwrap(), answer["id"].clone()));
        }
        assert_eq!(codes, [(-32700, Value::Null), (-32600, Value::Null), (-32600, json!(7))]);
    }
}
