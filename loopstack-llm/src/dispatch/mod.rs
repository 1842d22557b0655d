//! The pure parts of dispatching tool calls to child workflow runs, one run per call.
//!
//! - [Input projection](InputMapping): the child's input, built from the call and the
//!   parent run's state by a JSON mapping (`{"city": "arguments.city", "user":
//!   "ctx.user.id"}`) or by a Rust function ([`ChildInput`]), inside an
//!   [envelope](with_envelope) every child receives (`tool_call`, `tool_name`,
//!   `tool_arguments`, `tool_call_id`, `tool_call_index`).
//! - [Results](DispatchResults): the child's result ([`select_result`]:
//!   `tool_result_value`, else `tool_result_text`, else its output without
//!   `_`-prefixed keys), one [`DispatchEntry`] per call, the collection with its
//!   counts, the tool-result message for the next model turn and the entries by id;
//!   the [`ErrorPolicy`]; and the bounded form a large result is stored in
//!   ([`stored_form`]).
//! - [Redaction](Secrets): registered secret values replaced in text and JSON, and
//!   error details [bounded] in length.
//!
//! Nothing here runs anything or fails on its input: a missing value is null, and
//! a mapping is checked once, when it is made.
//!
//! ```
//! use loopstack_llm::dispatch::{CallView, DispatchEntry, DispatchResults, InputMapping, ProjectionContext, Secrets};
//! use loopstack_llm::ToolUse;
//! use serde_json::json;
//!
//! let mapping = InputMapping::new(json!({"order": "arguments.order_no", "customer": "ctx.customer.id"}))?;
//! let parent = json!({"customer": {"id": "cus_1", "name": "Ada"}});
//! let calls = [ToolUse::new("call_1", "issue_refund", json!({"order_no": "2024-0001"}))];
//! let secrets = Secrets::new().with("sk-live-0123456789");
//!
//! let mut results = DispatchResults::new();
//! for (index, call) in calls.iter().enumerate() {
//!     let view = CallView::of(call, index);
//!     let input = mapping.child_input(&ProjectionContext::new(view, &parent));
//!     assert_eq!(input["customer"], "cus_1");
//!     assert_eq!(input["tool_call_id"], "call_1");
//!     // ... the child run of the `refund` workflow ends with this state:
//!     let output = json!({"tool_result_text": "refunded 2024-0001", "_attempts": 1});
//!     let mut entry = DispatchEntry::from_child(&view, "refund", output, None);
//!     if let Some(value) = &mut entry.result.value {
//!         secrets.redact_value(value);
//!     }
//!     results.push(entry);
//! }
//! assert!(results.all_succeeded());
//! let message = results.message().unwrap();
//! assert_eq!(message.tool_results_iter().next().unwrap().content, "refunded 2024-0001");
//! # Ok::<(), loopstack_llm::dispatch::MappingError>(())
//! ```

mod projection;
mod results;

/// Secrets and bounded error details live in the core, where the runtime keeps its secrets.
pub use loopstack_core::secrets::{DEFAULT_MAX_ERROR_CHARS, MIN_SECRET_CHARS, REDACTED, Secrets, bounded};
pub use projection::{
    CallView, ChildInput, ENVELOPE_KEYS, InputFn, InputMapping, MappingError, ProjectionContext, RESERVED_KEYS,
    TOOL_ARGUMENTS, TOOL_CALL, TOOL_CALL_ID, TOOL_CALL_INDEX, TOOL_INPUT, TOOL_NAME, with_envelope,
};
pub use results::{
    DEFAULT_MAX_STORED_BYTES, DispatchEntry, DispatchResults, ErrorPolicy, ResultSource, TOOL_RESULT_TEXT,
    TOOL_RESULT_VALUE, content_text, select_result, stored_form, truncate_bytes,
};
