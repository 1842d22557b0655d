//! What commands print: a run's outcome, and `show`.

use super::*;

/// How a drive left the run.
pub(super) async fn outcome_text(
    runtime: &Runtime,
    run_id: RunId,
    outcome: &RunOutcome,
    json: bool,
) -> Result<String, CliError> {
    let record = runtime.store().load_run(run_id).await?;
    let waiting_for: Vec<&str> = match outcome {
        RunOutcome::Waiting { signals, .. } => signals.clone(),
        _ => Vec::new(),
    };
    let pending = match runtime.definition_of(&record.workflow) {
        Some(def) => loopstack_llm::pending_calls(def, &record)?,
        None => None,
    };
    if json {
        let mut value = loopstack_server::views::run(&record.summary());
        value["waiting_for"] = json!(waiting_for);
        if let Some(pending) = &pending {
            value["pending_calls"] = json!(pending);
        }
        if let RunOutcome::Queued { signal } = outcome {
            value["queued_signal"] = json!(signal);
        }
        return Ok(value.to_string() + "\n");
    }
    Ok(match outcome {
        RunOutcome::Completed => format!("{run_id} completed at step {}\n", record.step),
        RunOutcome::Waiting { place, signals } => {
            let mut out = format!(
                "{run_id} waits at {place} for: {}\n",
                if signals.is_empty() { "a timer".to_owned() } else { signals.join(", ") }
            );
            if let Some(pending) = pending.filter(|p| !p.is_empty()) {
                let outcome = loopstack_server::views::is_outcome_place(place);
                loopstack_server::views::pending_lines(
                    &mut out,
                    run_id,
                    &pending,
                    outcome,
                    loopstack_server::views::Answer::Cli,
                );
            }
            out
        }
        RunOutcome::Queued { signal } => {
            format!("{run_id}: signal {signal} queued; another driver holds the run and delivers it\n")
        }
        RunOutcome::Stopped { reason } => format!("{run_id} stopped at step {}: {}\n", record.step, one_line(reason)),
        other => format!("{run_id} {other:?}\n"),
    })
}

/// A run, in full.
pub(super) async fn show(runtime: &Runtime, run_id: RunId, json: bool) -> Result<String, CliError> {
    let store = runtime.store();
    let record = store.load_run(run_id).await?;
    let history = store.history(run_id).await?;
    let takeovers = store.takeovers(run_id).await?;
    let documents = store.documents(run_id).await?;
    let state = loopstack_server::views::raw(&record.state);
    let waits = loopstack_server::views::Waits::of(runtime, &record)?;
    if json {
        let mut value = loopstack_server::views::run(&record.summary());
        if let Some(waits) = &waits {
            value["waits_for"] = waits.json();
        }
        value["history"] = history.iter().map(loopstack_server::views::step).collect();
        value["takeovers"] = takeovers.iter().map(loopstack_server::views::takeover).collect();
        value["state"] = state;
        value["documents"] = documents.iter().map(|d| loopstack_server::views::document(d)).collect();
        if let Some(fork) = loopstack_server::views::fork(record.forked_from, &documents) {
            value["fork"] = fork;
        }
        return Ok(value.to_string() + "\n");
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {run_id}: {} at {} (workflow {} v{}, step {})",
        record.status.as_str(),
        record.place,
        record.workflow,
        record.version,
        record.step
    );
    if let Some(holder) = loopstack_server::views::Holder::of(&record.summary(), loopstack_core::Timestamp::now()) {
        let until = holder.until.map_or_else(|| "no end".to_owned(), |t| t.to_string());
        if holder.stalled {
            let _ = writeln!(
                out,
                "stalled: the lease of {} ran out at {until}; a worker takes the run over (or `resume --take-over`)",
                holder.owner
            );
        } else {
            let _ = writeln!(out, "held by {} since {} (lease until {until})", holder.owner, holder.since);
        }
    }
    if let Some(error) = &record.error {
        let _ = writeln!(out, "error: {}", one_line(error));
    }
    if let Some(parent) = record.parent {
        let _ = writeln!(out, "parent: {parent}");
    }
    if let Some(forked_from) = record.forked_from {
        let _ = writeln!(
            out,
            "{}",
            loopstack_server::views::fork_line(forked_from, loopstack_server::views::fork_record(&documents).as_ref())
        );
    }
    if let Some(waits) = &waits {
        loopstack_server::views::waits_text(&mut out, run_id, waits, loopstack_server::views::Answer::Cli);
    } else if record.status == RunStatus::Waiting {
        let _ = writeln!(
            out,
            "\nwaits for: (workflow `{}` is not registered in this binary, so what it takes is unknown)",
            record.workflow
        );
    }
    let _ = writeln!(out, "\nhistory:");
    // The takeovers in their place among the steps, by time.
    let mut takeovers = takeovers.iter().peekable();
    for s in &history {
        while let Some(t) = takeovers.next_if(|t| t.at < s.at) {
            let _ = writeln!(out, "       {} {}", t.at, loopstack_server::views::takeover_line(t));
        }
        let _ = writeln!(out, "  {:>3}. {} {} -> {} ({})", s.step, s.at, s.from, s.to, s.transition);
    }
    for t in takeovers {
        let _ = writeln!(out, "       {} {}", t.at, loopstack_server::views::takeover_line(t));
    }
    let messages: Vec<_> =
        documents.iter().filter(|d| d.doc_type == loopstack_llm::generate::MESSAGE_DOCUMENT).collect();
    if !messages.is_empty() {
        let _ = writeln!(out, "\nconversation:");
        for doc in messages {
            match doc.read::<loopstack_llm::Message>() {
                Ok(message) => {
                    let _ = writeln!(out, "  {message}");
                }
                Err(e) => {
                    let _ = writeln!(out, "  (unreadable message: {e})");
                }
            }
        }
    }
    let others: Vec<_> = documents.iter().filter(|d| d.doc_type != loopstack_llm::generate::MESSAGE_DOCUMENT).collect();
    if !others.is_empty() {
        let _ = writeln!(out, "\ndocuments:");
        for doc in others {
            let key = doc.key.as_deref().map(|k| format!(" {k}")).unwrap_or_default();
            // An image's data is no text for a terminal: its type and size instead.
            let content = match doc.doc_type == loopstack_llm::image::IMAGE_DOCUMENT {
                true => format!("{} image, {} bytes", meta_text(doc, "media_type"), meta_text(doc, "bytes")),
                false => doc.content.get().to_owned(),
            };
            let _ = writeln!(out, "  {}{key} v{} (step {}): {content}", doc.doc_type, doc.version, doc.step);
        }
    }
    let _ = writeln!(out, "\nstate: {}", serde_json::to_string_pretty(&state).unwrap_or_default());
    Ok(out)
}

/// A metadata entry of a document as text (`?` when it has none).
fn meta_text(doc: &loopstack_core::Document, name: &str) -> String {
    match doc.metadata.get(name) {
        Some(serde_json::Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => "?".to_owned(),
    }
}
