//! A tool that blocks its thread still gets its timeout result on time: each call
//! runs in a task of its own, and the timeout fires in the caller.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use loopstack_core::{RunContext, Tool, ToolContext, ToolError, ToolOptions, ToolOutput, ToolRegistry};
use loopstack_llm::{ContentBlock, LlmDelegateToolCalls, Message, Role, ToolUse};
use serde_json::{Value, json};

/// Blocks its thread (no await) until released: what a tool doing synchronous I/O
/// outside `spawn_blocking` does.
struct Blocker {
    release: Mutex<mpsc::Receiver<()>>,
    started: Mutex<mpsc::Sender<()>>,
    finished: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl Tool for Blocker {
    fn name(&self) -> &str {
        "blocker"
    }
    fn description(&self) -> &str {
        "Blocks."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn options(&self) -> ToolOptions {
        ToolOptions::new().timeout(Duration::from_millis(200))
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let _ = self.started.lock().unwrap().send(());
        // The bound only keeps a broken build from hanging the suite.
        let released = self.release.lock().unwrap().recv_timeout(Duration::from_secs(20));
        self.finished.store(true, Ordering::SeqCst);
        Ok(ToolOutput::text(if released.is_ok() { "released" } else { "gave up waiting" }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_blocking_its_thread_gets_its_timeout_result_while_it_is_still_blocked() {
    let (release, release_rx) = mpsc::channel();
    let (started_tx, started) = mpsc::channel();
    let finished = Arc::new(AtomicBool::new(false));
    let tool = Blocker { release: Mutex::new(release_rx), started: Mutex::new(started_tx), finished: finished.clone() };
    let delegate = LlmDelegateToolCalls::new(ToolRegistry::new().with(tool).unwrap());
    let message = Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse(ToolUse::new("c1", "blocker", json!({})))],
    };
    // Driven from a task, as a worker drives runs (a call made outside any task, from
    // `block_on`, runs inline).
    let drive = tokio::spawn(async move {
        let (cx, offered) = (RunContext::detached("test"), ["blocker".to_owned()]);
        delegate.run(&cx, &message, &offered).await
    });
    let result = tokio::time::timeout(Duration::from_secs(60), drive).await.expect("the delegate returns").unwrap();
    started.recv().expect("the tool ran");
    let r = &result.results[0];
    assert!(r.is_error && r.content == "tool `blocker` timed out after 200 ms", "{r:?}");
    assert!(!finished.load(Ordering::SeqCst), "the result came while the tool was still blocked");
    release.send(()).unwrap();
}

/// Holds a sender the test's receiver sees closed when the tool's future is dropped.
struct Pending {
    started: tokio::sync::Notify,
    dropped: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

#[async_trait::async_trait]
impl Tool for Pending {
    fn name(&self) -> &str {
        "pending"
    }
    fn description(&self) -> &str {
        "Never answers."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let _dropped = self.dropped.lock().unwrap().take();
        self.started.notify_one();
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_no_longer_awaited_is_aborted() {
    let (dropped_tx, dropped) = tokio::sync::oneshot::channel();
    let tool = Arc::new(Pending { started: Default::default(), dropped: Mutex::new(Some(dropped_tx)) });
    struct Shared(Arc<Pending>);
    #[async_trait::async_trait]
    impl Tool for Shared {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn description(&self) -> &str {
            self.0.description()
        }
        fn input_schema(&self) -> Value {
            self.0.input_schema()
        }
        async fn call(&self, args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
            self.0.call(args, cx).await
        }
    }
    let delegate = LlmDelegateToolCalls::new(ToolRegistry::new().with(Shared(tool.clone())).unwrap());
    let message = Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse(ToolUse::new("c1", "pending", json!({})))],
    };
    let started = tool.clone();
    tokio::spawn(async move {
        let (cx, offered) = (RunContext::detached("test"), ["pending".to_owned()]);
        tokio::select! {
            _ = delegate.run(&cx, &message, &offered) => panic!("the call never ends"),
            () = started.started.notified() => {}
        }
    })
    .await
    .unwrap();
    // The delegate's future is gone: the tool's task is aborted and its future dropped.
    let closed = tokio::time::timeout(Duration::from_secs(60), dropped).await.expect("the tool's future is dropped");
    assert!(closed.is_err(), "dropped, not sent");
}

#[test]
fn with_isolated_calls_the_timeout_holds_from_block_on_too() {
    let (release, release_rx) = mpsc::channel();
    let (started_tx, started) = mpsc::channel();
    let finished = Arc::new(AtomicBool::new(false));
    let tool = Blocker { release: Mutex::new(release_rx), started: Mutex::new(started_tx), finished: finished.clone() };
    let delegate = LlmDelegateToolCalls::new(ToolRegistry::new().with(tool).unwrap()).isolate_calls(true);
    let message = Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse(ToolUse::new("c1", "blocker", json!({})))],
    };
    // The body of `#[tokio::main]`: `block_on` on a multi-thread runtime, no task.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let result = runtime.block_on(async {
        let (cx, offered) = (RunContext::detached("test"), ["blocker".to_owned()]);
        delegate.run(&cx, &message, &offered).await
    });
    started.recv().expect("the tool ran");
    let r = &result.results[0];
    assert!(r.is_error && r.content == "tool `blocker` timed out after 200 ms", "{r:?}");
    assert!(!finished.load(Ordering::SeqCst), "the result came while the tool was still blocked");
    release.send(()).unwrap();
    runtime.shutdown_background();
}
