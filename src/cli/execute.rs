//! Running loopstack's commands.

use super::*;

pub(super) fn parse_json(text: Option<&str>, what: &'static str) -> Result<Value, CliError> {
    match text {
        None => Ok(Value::Null),
        Some(text) => serde_json::from_str(text).map_err(|source| CliError::Json { what, source }),
    }
}

/// Runs a parsed command against `runtime` and returns what to print.
pub async fn execute(runtime: &Runtime, cli: &Cli) -> Result<String, CliError> {
    let json = cli.json;
    let mut out = String::new();
    match &cli.command {
        Command::Workflows => {
            let names = runtime.workflows();
            if json {
                out = json!({ "workflows": names }).to_string() + "\n";
            } else {
                for name in names {
                    let _ = writeln!(out, "{name}");
                }
            }
        }
        Command::Run { workflow, input, wait } => {
            let input = parse_json(input.as_deref(), "--input")?;
            let run_id = runtime.submit_by_name(workflow, input).await?;
            if *wait {
                let outcome = runtime.drive_by_name(run_id).await?;
                out = outcome_text(runtime, run_id, &outcome, json).await?;
            } else if json {
                out = json!({ "run_id": run_id, "status": "queued" }).to_string() + "\n";
            } else {
                let _ = writeln!(out, "{run_id} queued (a worker drives it; `run --wait` drives it here)");
            }
        }
        Command::Runs { workflow, status, place, limit } => {
            let mut query = RunQuery::new().limit(*limit);
            if let Some(workflow) = workflow {
                query = query.workflow(workflow.clone());
            }
            if let Some(status) = status {
                query = query.status(*status);
            }
            if let Some(place) = place {
                query = query.place(place.clone());
            }
            let page = runtime.store().list_runs(&query).await?;
            if json {
                let runs: Vec<Value> = page.runs.iter().map(loopstack_server::views::run).collect();
                out = json!({ "runs": runs, "next": page.next }).to_string() + "\n";
            } else {
                let now = loopstack_core::Timestamp::now();
                for run in &page.runs {
                    let holder = loopstack_server::views::Holder::of(run, now);
                    let status = if holder.is_some_and(|h| h.stalled) { "stalled" } else { run.status.as_str() };
                    let _ = write!(
                        out,
                        "{}  {:<10} {:<20} v{:<3} {:<16} step {:<4} {}",
                        run.run_id, status, run.workflow, run.version, run.place, run.step, run.updated_at
                    );
                    match holder {
                        Some(h) => {
                            let _ = writeln!(out, "  held by {}", h.owner);
                        }
                        None => out.push('\n'),
                    }
                }
                if let Some(next) = page.next {
                    let _ = writeln!(out, "(more: --limit, or list runs before {next})");
                }
            }
        }
        Command::Show { run } => out = show(runtime, *run, json).await?,
        Command::Export { run } => {
            let export = loopstack_llm::RunExport::of(runtime.store().as_ref(), *run).await?;
            out = export.to_json() + "\n";
        }
        Command::Signal { run, name, payload } => {
            let payload = parse_json(payload.as_deref(), "the payload")?;
            let outcome = runtime.signal_by_name(*run, name, payload).await?;
            out = outcome_text(runtime, *run, &outcome, json).await?;
        }
        Command::Approve { run, calls } => out = decide(runtime, *run, calls, Verdict::Approve, json).await?,
        Command::Resolve { run, call, result } => {
            let calls = std::slice::from_ref(call);
            out = decide(runtime, *run, calls, Verdict::Result(result), json).await?;
        }
        Command::Answer { run, call, input } => {
            let input = parse_json(Some(input), "the answer")?;
            let calls = std::slice::from_ref(call);
            out = decide(runtime, *run, calls, Verdict::Input(&input), json).await?;
        }
        Command::Deny { run, calls, reason } => {
            if reason.trim().is_empty() {
                return Err(CliError::EmptyReason);
            }
            out = decide(runtime, *run, calls, Verdict::Deny(reason), json).await?;
        }
        Command::Resume { run, take_over } => {
            let outcome = if *take_over {
                runtime.resume_by_name(*run).await?
            } else {
                match runtime.drive_by_name(*run).await {
                    Err(RunError::Store(StoreError::Leased { run_id, owner, until })) => {
                        return Err(CliError::Leased { run_id, owner, until });
                    }
                    driven => driven?,
                }
            };
            out = outcome_text(runtime, *run, &outcome, json).await?;
        }
        Command::Retry { run } => {
            let outcome = runtime.retry_by_name(*run).await?;
            out = outcome_text(runtime, *run, &outcome, json).await?;
        }
        Command::Eval(e) => {
            let args = EvalArgs {
                dataset: &e.dataset,
                agent: e.agent.as_deref().or(e.workflow.as_deref()).unwrap_or_default(),
                workflow: e.workflow.is_some(),
                repeats: e.repeats,
                concurrency: e.concurrency,
                id: e.id,
                scorers: &e.scorer,
                compare: e.compare.as_deref(),
            };
            out = eval(runtime, args, json).await?;
        }
        Command::Fork { run, step, edits: flags } => {
            let ForkFlags { system, model, state, keep_messages, messages } = &**flags;
            let mut edits = loopstack_core::ForkEdits::new();
            for (index, text) in messages {
                edits = edits.message_text(*index, text.clone());
            }
            edits.keep_messages = *keep_messages;
            edits.system.clone_from(system);
            edits.model.clone_from(model);
            if let Some(state) = state {
                edits.state =
                    Some(serde_json::from_str(state).map_err(|e| CliError::Json { what: "--state", source: e })?);
            }
            let fork = RunId::new();
            let outcome = runtime.fork_by_name(*run, *step, edits, fork).await?;
            out = outcome_text(runtime, fork, &outcome, json).await?;
        }
        Command::Cancel { run, reason } => {
            runtime.cancel(*run, reason.clone()).await?;
            out = if json {
                json!({ "run_id": run, "status": "cancelled" }).to_string() + "\n"
            } else {
                format!("{run} cancelled\n")
            };
        }
        #[cfg(feature = "serve")]
        Command::Serve { bind, port, token, worker, drain_timeout, name } => {
            let runtime = &recording(named(runtime, name.as_deref()));
            if token.as_deref().is_some_and(|t| t.trim().is_empty()) {
                return Err(CliError::Serve("the --token is empty".to_owned()));
            }
            if !bind.is_loopback() && token.is_none() {
                return Err(CliError::Serve(format!(
                    "serving on {bind}, beyond loopback, needs a --token (or LOOPSTACK_TOKEN)"
                )));
            }
            let listener = tokio::net::TcpListener::bind((*bind, *port))
                .await
                .map_err(|e| CliError::Serve(format!("could not listen on {bind}:{port}: {e}")))?;
            let address = listener.local_addr().map_err(|e| CliError::Serve(e.to_string()))?;
            // Before the line that says it serves: a SIGTERM right after it must find
            // the handler, not the default action that ends the process at once.
            let shutdown = super::shutdown_on_signal();
            let mcp =
                if cfg!(feature = "mcp-server") { format!(", MCP at http://{address}/mcp") } else { String::new() };
            eprintln!(
                "Studio on http://{address}/ and the API under http://{address}/api{mcp} (Ctrl-C or SIGTERM to stop)"
            );
            let mut options = crate::serve::ServeOptions::new();
            if let Some(token) = token {
                options = options.token(token.clone());
            }
            let driving = worker.then(|| {
                let worker = loopstack_core::Worker::new(runtime.clone()).drain_timeout(*drain_timeout);
                let shutdown = shutdown.clone();
                tokio::spawn(async move { worker.run(shutdown).await })
            });
            let served =
                crate::serve::serve_until(listener, runtime.clone(), options, shutdown.clone(), *drain_timeout);
            let result = served.await.map_err(|e| CliError::Serve(e.to_string()));
            shutdown.cancel();
            if let Some(driving) = driving {
                match driving.await {
                    Ok(Err(e)) => eprintln!("worker: {}", runtime.secrets().redact(&e.to_string())),
                    Err(e) => eprintln!("worker: {e}"),
                    Ok(Ok(())) => {}
                }
            }
            result?;
        }
        #[cfg(feature = "mcp-server")]
        Command::Mcp => {
            let handler = crate::mcp_server::McpHandler::new(runtime.clone());
            crate::mcp_server::serve_stdio(handler).await.map_err(|e| CliError::Serve(e.to_string()))?;
        }
        Command::Schedule { action } => out = schedule(runtime, action, json).await?,
        Command::Worker {
            concurrency,
            once,
            drain_timeout,
            name,
            #[cfg(feature = "serve")]
            metrics_addr,
        } => {
            let runtime = &named(runtime, name.as_deref());
            #[cfg(feature = "serve")]
            let runtime = &match metrics_addr {
                Some(_) => recording(runtime.clone()),
                None => runtime.clone(),
            };
            let worker =
                loopstack_core::Worker::new(runtime.clone()).concurrency(*concurrency).drain_timeout(*drain_timeout);
            if *once {
                let driven = worker.run_once().await?;
                out = if json {
                    json!({ "driven": driven }).to_string() + "\n"
                } else {
                    format!("drove {driven} run(s)\n")
                };
            } else {
                let shutdown = super::shutdown_on_signal();
                #[cfg(feature = "serve")]
                let probes = match metrics_addr {
                    Some(addr) => Some(serve_metrics(runtime, addr, shutdown.clone()).await?),
                    None => None,
                };
                eprintln!("worker: driving {} (Ctrl-C or SIGTERM to stop)", runtime.workflows().join(", "));
                worker.run(shutdown).await?;
                #[cfg(feature = "serve")]
                if let Some(probes) = probes {
                    // The worker has stopped, so has the server (the same token): this
                    // only waits for it to close its connections.
                    let _ = probes.await;
                }
            }
        }
    }
    Ok(out)
}

/// `runtime`, recording metrics: in its own [`Metrics`](crate::metrics::Metrics)
/// if the app gave it one, else in a new one.
#[cfg(feature = "serve")]
fn recording(runtime: Runtime) -> Runtime {
    if runtime.metrics().is_some() { runtime } else { runtime.with_metrics(crate::metrics::Metrics::new()) }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until `shutdown`, in a task.
#[cfg(feature = "serve")]
async fn serve_metrics(
    runtime: &Runtime,
    addr: &str,
    shutdown: loopstack_core::CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, CliError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::Serve(format!("could not listen on {addr} for metrics: {e}")))?;
    let address = listener.local_addr().map_err(|e| CliError::Serve(e.to_string()))?;
    eprintln!("worker: metrics on http://{address}/metrics, probes on /healthz and /readyz");
    let router = crate::serve::metrics_router(runtime.clone());
    Ok(tokio::spawn(async move {
        let served = axum::serve(listener, router).with_graceful_shutdown(async move { shutdown.cancelled().await });
        if let Err(e) = served.await {
            eprintln!("worker: the metrics server stopped: {e}");
        }
    }))
}

/// `runtime`, named `name` in the leases it takes when a name is given.
fn named(runtime: &Runtime, name: Option<&str>) -> Runtime {
    match name {
        Some(name) => runtime.clone().owner(name),
        None => runtime.clone(),
    }
}

/// A `schedule` command.
pub(super) async fn schedule(runtime: &Runtime, action: &ScheduleCommand, json: bool) -> Result<String, CliError> {
    use loopstack_core::schedule::{Missed, Overlap, Schedule, parse_interval};
    let mut out = String::new();
    let changed = match action {
        ScheduleCommand::Add { id, workflow, cron, every, timezone, input, missed, overlap, grace, paused } => {
            let input = parse_json(input.as_deref(), "--input")?;
            let mut when = match (cron, every) {
                (Some(cron), _) => Schedule::cron(cron)?,
                (None, Some(every)) => Schedule::every(parse_interval(every)?)?,
                // clap requires one of the two.
                (None, None) => {
                    return Err(loopstack_core::schedule::ScheduleError::InvalidCron {
                        expr: String::new(),
                        reason: "give --cron or --every".to_owned(),
                    }
                    .into());
                }
            };
            if let Some(timezone) = timezone {
                when = when.timezone(timezone)?;
            }
            when = when.missed(missed.parse::<Missed>()?).overlap(overlap.parse::<Overlap>()?);
            if let Some(grace) = grace {
                when = when.grace(parse_interval(grace)?);
            }
            if *paused {
                when = when.paused();
            }
            runtime.schedule(id, workflow, input, when).await?
        }
        ScheduleCommand::List => {
            let schedules = runtime.schedules().await?;
            if json {
                let list: Vec<Value> = schedules.iter().map(loopstack_server::views::schedule).collect();
                return Ok(json!({ "schedules": list }).to_string() + "\n");
            }
            if schedules.is_empty() {
                out.push_str("no schedules (`schedule add` stores one)\n");
            }
            for s in &schedules {
                let _ = writeln!(out, "{}", schedule_line(s));
            }
            return Ok(out);
        }
        ScheduleCommand::Pause { id } => runtime.pause_schedule(id).await?,
        ScheduleCommand::Resume { id } => runtime.resume_schedule(id).await?,
        ScheduleCommand::Delete { id } => {
            runtime.delete_schedule(id).await?;
            return Ok(if json {
                json!({ "id": id, "deleted": true }).to_string() + "\n"
            } else {
                format!("{id} deleted\n")
            });
        }
    };
    if json {
        out = loopstack_server::views::schedule(&changed).to_string() + "\n";
    } else {
        let _ = writeln!(out, "{}", schedule_line(&changed));
    }
    Ok(out)
}

/// A schedule on one line: id, workflow, when, what is next, the last run.
fn schedule_line(s: &loopstack_core::ScheduleRecord) -> String {
    let next = if s.paused { "paused".to_owned() } else { format!("next {}", s.next_due) };
    let last = match (s.last_run, s.last_due) {
        (Some(run), Some(due)) => format!("last {run} (due {due})"),
        _ => "no run yet".to_owned(),
    };
    let error = s.last_error.as_deref().map(|e| format!("  error: {e}")).unwrap_or_default();
    format!(
        "{}  {}  {}  missed: {}  overlap: {}  {next}  {last}{error}",
        s.id,
        s.workflow,
        s.recurrence,
        s.missed.as_str(),
        s.overlap.as_str()
    )
}

/// What `approve`, `deny` and `resolve` say of each call they name.
#[derive(Clone, Copy)]
pub(super) enum Verdict<'a> {
    Approve,
    Deny(&'a str),
    Result(&'a str),
    Input(&'a serde_json::Value),
}

/// `approve`, `deny` or `resolve`: decides on the named calls of an agent's run,
/// or on all that wait, and drives the run on.
pub(super) async fn decide(
    runtime: &Runtime,
    run_id: RunId,
    calls: &[String],
    verdict: Verdict<'_>,
    json: bool,
) -> Result<String, CliError> {
    let record = runtime.store().load_run(run_id).await?;
    let waits = loopstack_server::views::Waits::of(runtime, &record)?;
    let pending = match waits.as_ref().and_then(|w| w.pending.as_ref()) {
        Some(pending) if !pending.is_empty() => pending,
        _ => return Err(CliError::NotAwaitingApproval { run_id, why: standing(runtime, &record, waits.as_ref()) }),
    };
    let mut chosen: Vec<&str> = Vec::new();
    for call in calls {
        if !pending.iter().any(|p| p.call_id == *call) {
            let pending = pending.iter().map(|p| format!("{} ({})", p.call_id, p.name)).collect();
            return Err(CliError::NotPending { run_id, call_id: call.clone(), pending });
        }
        if !chosen.contains(&call.as_str()) {
            chosen.push(call);
        }
    }
    if chosen.is_empty() {
        chosen = pending.iter().map(|p| p.call_id.as_str()).collect();
    }
    let decisions = loopstack_llm::ToolDecisions::new(chosen.into_iter().map(|call| match verdict {
        Verdict::Approve => loopstack_llm::ToolDecision::approve(call),
        Verdict::Deny(reason) => loopstack_llm::ToolDecision::deny(call, reason),
        Verdict::Result(result) => loopstack_llm::ToolDecision::result(call, result),
        Verdict::Input(input) => loopstack_llm::ToolDecision::input(call, input.clone()),
    }));
    let outcome = loopstack_llm::decide_by_name(runtime, run_id, &decisions).await?;
    outcome_text(runtime, run_id, &outcome, json).await
}

/// How a run that takes no decision stands, in words, for the error that says so.
pub(super) fn standing(
    runtime: &Runtime,
    record: &loopstack_core::RunRecord,
    waits: Option<&loopstack_server::views::Waits>,
) -> String {
    if record.status != RunStatus::Waiting {
        return format!("it is {} at {}", record.status.as_str(), record.place);
    }
    if runtime.definition_of(&record.workflow).is_none() {
        return format!("it is a run of workflow `{}`, which this binary does not register", record.workflow);
    }
    let signals: Vec<&str> = waits.map(|w| w.signals.iter().map(|t| t.name).collect()).unwrap_or_default();
    let timer = waits.is_some_and(|w| !w.timers.is_empty());
    let what = match (signals.is_empty(), timer) {
        (false, false) => format!("the signal {}", signals.join(", ")),
        (false, true) => format!("the signal {} or a timer", signals.join(", ")),
        (true, _) => "a timer".to_owned(),
    };
    format!("it waits at {} for {what}; no tool calls wait for a decision (`show` says more)", record.place)
}
