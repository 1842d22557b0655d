//! The tool registry.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use loopstack_model::ToolDefinition;
use serde_json::Value;

use crate::tool::{Tool, ToolContext, ToolError, ToolErrorKind, ToolOptions, ToolOutput, is_valid_tool_name};

/// A registered tool: what a model is told about it (its [`ToolDefinition`], shared
/// with every model turn that offers it, and read through this spec: `spec.name`,
/// `spec.input_schema`) and how it is run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolSpec {
    /// What a model is told about the tool.
    pub definition: Arc<ToolDefinition>,
    /// How the tool is run.
    pub options: ToolOptions,
}

impl ToolSpec {
    /// A spec with the default options: for tools a step offers to a model
    /// without registering them (such as an agent's `respond` tool), whose calls it
    /// answers itself.
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> Self {
        Self { definition: Arc::new(ToolDefinition::new(name, description, input_schema)), options: ToolOptions::new() }
    }
}

/// A spec reads as its definition: `spec.name`, `spec.fingerprint()`.
impl std::ops::Deref for ToolSpec {
    type Target = ToolDefinition;

    fn deref(&self) -> &ToolDefinition {
        &self.definition
    }
}

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two tools share one name.
    #[error("two tools are named `{name}`: `{existing}` is registered and `{new}` cannot take the same name")]
    Duplicate {
        /// The shared name.
        name: String,
        /// The Rust type of the tool registered first.
        existing: &'static str,
        /// The Rust type of the tool that was refused.
        new: &'static str,
    },
    /// The name does not match `^[a-zA-Z0-9_-]{1,64}$`.
    #[error("tool name `{0}` is invalid: use 1 to 64 ASCII letters, digits, `_` or `-`")]
    InvalidName(String),
    /// No tool is registered under this name.
    #[error("no tool named `{0}` is registered")]
    Unknown(String),
    /// The input schema is not a JSON object.
    #[error("tool `{0}`'s input schema is not a JSON object")]
    InvalidSchema(String),
    /// A workflow of this name is registered with the runtime already: the second
    /// would have replaced it, and its runs would have resumed under the wrong
    /// table, prompt or tools.
    #[error(
        "a workflow named `{name}` is registered already, and `{new}` cannot take its name: register each \
         workflow (and each agent, with `Agent::named`) under a name of its own"
    )]
    DuplicateWorkflow {
        /// The shared name.
        name: String,
        /// The Rust type of the workflow that was refused.
        new: &'static str,
    },
    /// A workflow name that does not match `^[a-zA-Z0-9_-]{1,64}$`.
    #[error("workflow name `{0}` is invalid: use 1 to 64 ASCII letters, digits, `_` or `-`")]
    InvalidWorkflowName(String),
}

#[derive(Clone)]
struct Entry {
    spec: Arc<ToolSpec>,
    tool: Arc<dyn Tool>,
    type_name: &'static str,
    known_args: Option<BTreeSet<String>>,
}

/// The tools a run can call, by name.
///
/// Cloning is cheap: clones share the registered tools. Each tool's schema is computed
/// once, at registration.
///
/// ```
/// # use loopstack_core::{ToolRegistry, Tool, ToolContext, ToolError, ToolOutput};
/// # struct Clock;
/// # #[async_trait::async_trait]
/// # impl Tool for Clock {
/// #     fn name(&self) -> &str { "clock" }
/// #     fn description(&self) -> &str { "Tells the time." }
/// #     fn input_schema(&self) -> serde_json::Value { serde_json::json!({"type": "object", "properties": {}}) }
/// #     async fn call(&self, _: serde_json::Value, _: &ToolContext) -> Result<ToolOutput, ToolError> { Ok(ToolOutput::text("noon")) }
/// # }
/// let mut tools = ToolRegistry::new();
/// tools.register(Clock)?;
/// let err = tools.register(Clock).unwrap_err();
/// assert!(err.to_string().contains("two tools are named `clock`"));
/// # Ok::<(), loopstack_core::RegistryError>(())
/// ```
#[derive(Clone, Default)]
pub struct ToolRegistry {
    inner: Arc<Inner>,
}

#[derive(Clone, Default)]
struct Inner {
    /// The names, in registration order; `entries[i]` is the tool named `order[i]`.
    order: Vec<Arc<str>>,
    entries: Vec<Entry>,
    /// Positions by name, for a registry too large to scan (see [`Inner::SCAN`]).
    by_name: HashMap<Arc<str>, usize>,
}

impl Inner {
    /// Up to this many tools a lookup compares names instead of hashing one: an
    /// agent's few tools are looked up several times for every call.
    const SCAN: usize = 8;

    fn position(&self, name: &str) -> Option<usize> {
        if self.order.len() <= Self::SCAN {
            self.order.iter().position(|n| **n == *name)
        } else {
            self.by_name.get(name).copied()
        }
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        self.position(name).map(|i| &self.entries[i])
    }
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry").field("tools", &self.inner.order).finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool, refusing a second tool with a name already taken.
    pub fn register<T: Tool>(&mut self, tool: T) -> Result<&mut Self, RegistryError> {
        self.insert(Arc::new(tool), std::any::type_name::<T>())
    }

    /// Registers a tool already behind an `Arc`.
    pub fn register_arc(&mut self, tool: Arc<dyn Tool>) -> Result<&mut Self, RegistryError> {
        self.insert(tool, "dyn Tool")
    }

    /// Registers a tool and returns the registry, for chaining.
    pub fn with<T: Tool>(mut self, tool: T) -> Result<Self, RegistryError> {
        self.register(tool)?;
        Ok(self)
    }

    fn insert(&mut self, tool: Arc<dyn Tool>, type_name: &'static str) -> Result<&mut Self, RegistryError> {
        let name = tool.name().to_owned();
        if !is_valid_tool_name(&name) {
            return Err(RegistryError::InvalidName(name));
        }
        if let Some(existing) = self.inner.entry(&name) {
            return Err(RegistryError::Duplicate { name, existing: existing.type_name, new: type_name });
        }
        let input_schema = tool.input_schema();
        let Value::Object(obj) = &input_schema else {
            return Err(RegistryError::InvalidSchema(name));
        };
        // Unknown arguments are dropped only where the schema is a plain closed object;
        // for enums (`oneOf`/`anyOf`) and open objects the tool sees everything.
        let closed = obj.get("additionalProperties") == Some(&Value::Bool(false))
            && !["oneOf", "anyOf", "allOf"].iter().any(|k| obj.contains_key(*k));
        let known_args = match obj.get("properties") {
            Some(Value::Object(props)) if closed => Some(props.keys().cloned().collect()),
            _ => None,
        };
        let definition = ToolDefinition::new(name.clone(), tool.description(), input_schema);
        let spec = Arc::new(ToolSpec { definition: Arc::new(definition), options: tool.options() });
        // Computed here, once, rather than in the first model turn that offers it.
        spec.fingerprint();
        let key: Arc<str> = Arc::from(name.as_str());
        let inner = Arc::make_mut(&mut self.inner);
        inner.by_name.insert(key.clone(), inner.order.len());
        inner.order.push(key);
        inner.entries.push(Entry { spec, tool, type_name, known_args });
        Ok(self)
    }

    /// Marks the tool registered under `name` as needing a person's approval
    /// before each call runs (as `#[tool(approve)]` does), whatever its own options
    /// say. Errors with [`RegistryError::Unknown`] when no such tool is registered.
    pub fn require_approval(&mut self, name: &str) -> Result<&mut Self, RegistryError> {
        self.set_options(name, |o| o.approve(true))
    }

    /// Changes the options of the tool registered under `name`: its timeout,
    /// concurrency or approval, for this registry only.
    pub fn set_options(
        &mut self,
        name: &str,
        f: impl FnOnce(ToolOptions) -> ToolOptions,
    ) -> Result<&mut Self, RegistryError> {
        let inner = Arc::make_mut(&mut self.inner);
        let i = inner.position(name).ok_or_else(|| RegistryError::Unknown(name.to_owned()))?;
        let entry = &mut inner.entries[i];
        let spec = Arc::make_mut(&mut entry.spec);
        spec.options = f(spec.options);
        Ok(self)
    }

    /// The tool registered under `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.inner.entry(name).map(|e| &e.tool)
    }

    /// The spec of the tool registered under `name`.
    pub fn spec(&self, name: &str) -> Option<&Arc<ToolSpec>> {
        self.inner.entry(name).map(|e| &e.spec)
    }

    /// The specs of all tools, in registration order.
    pub fn specs(&self) -> impl Iterator<Item = &Arc<ToolSpec>> + '_ {
        self.inner.entries.iter().map(|e| &e.spec)
    }

    /// The names of all tools, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.inner.order.iter().map(|n| &**n)
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.inner.order.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.inner.order.is_empty()
    }

    /// Calls a tool by name.
    ///
    /// An unknown name is an [`ToolErrorKind::UnknownTool`] error naming the tools that
    /// exist. Arguments the schema does not list are dropped with a `tracing` warning
    /// before the tool sees them.
    pub async fn call(&self, name: &str, mut args: Value, cx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(entry) = self.inner.entry(name) else {
            return Err(self.unknown_tool(name, None));
        };
        if let (Some(known), Value::Object(map)) = (&entry.known_args, &mut args)
            && map.keys().any(|k| !known.contains(k))
        {
            map.retain(|k, _| {
                let keep = known.contains(k);
                if !keep {
                    tracing::warn!(tool = name, argument = %k, call_id = cx.call_id(), "ignoring unknown tool argument");
                }
                keep
            });
        }
        entry.tool.call(args, cx).await
    }

    /// The error for a call to a tool that is unknown, or (with `offered`) not offered.
    pub fn unknown_tool(&self, name: &str, offered: Option<&[String]>) -> ToolError {
        let available: Vec<&str> = match offered {
            Some(offered) => offered.iter().map(String::as_str).collect(),
            None => self.names().collect(),
        };
        let list = if available.is_empty() { "none".to_owned() } else { available.join(", ") };
        ToolError::with_kind(
            ToolErrorKind::UnknownTool,
            format!("unknown tool `{name}`; the available tools are: {list}"),
        )
    }
}
