//! A run's place in an OpenTelemetry trace (feature `otel`).
//!
//! A run is one trace however many drives it takes, on whatever workers, across
//! restarts: when it is created, the W3C `traceparent` of the span that creates it
//! (a request handler's, or the parent run's for a child run; a `loopstack.start`
//! span of its own when there is none) is kept with it
//! ([`RunRecord::trace_parent`](crate::store::RunRecord::trace_parent)), and every
//! drive's `loopstack.run` span is made a child of it. A run kept without one (created
//! before tracing was on, or a fork) gets a trace id derived from its run id, so its
//! drives still share one trace. Without the feature all of this compiles away.

use crate::store::NewRun;

/// `new` with the trace context its drives will continue.
#[cfg(feature = "otel")]
pub(crate) fn traced(new: NewRun) -> NewRun {
    let traceparent = otel::creation(&new.workflow, new.run_id);
    new.trace_parent(traceparent)
}

/// `new` unchanged: without the `otel` feature runs keep no trace context.
#[cfg(not(feature = "otel"))]
#[inline]
pub(crate) fn traced(new: NewRun) -> NewRun {
    new
}

/// Makes `span`, a drive's run span, a child of the run's trace context.
#[cfg(feature = "otel")]
pub(crate) fn join(span: &tracing::Span, run_id: crate::RunId, traceparent: Option<&str>) {
    otel::join(span, run_id, traceparent);
}

/// Nothing to join without the `otel` feature.
#[cfg(not(feature = "otel"))]
#[inline]
pub(crate) fn join(_: &tracing::Span, _: crate::RunId, _: Option<&str>) {}

#[cfg(feature = "otel")]
mod otel {
    use opentelemetry::Context;
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    use crate::RunId;

    /// The `traceparent` a new run keeps: the current span's, else that of a
    /// `loopstack.start` span begun (and ended) here as the root of the run's trace.
    /// `None` when no OpenTelemetry layer is installed.
    pub(super) fn creation(workflow: &str, run_id: RunId) -> Option<String> {
        if let Some(current) = traceparent(&tracing::Span::current()) {
            return Some(current);
        }
        let start = tracing::info_span!(
            parent: None,
            "loopstack.start",
            otel.name = format!("start {workflow}"),
            workflow,
            run_id = %run_id,
        );
        traceparent(&start)
    }

    pub(super) fn join(span: &tracing::Span, run_id: RunId, traceparent: Option<&str>) {
        let parent = traceparent.and_then(parse).unwrap_or_else(|| derived(run_id));
        // An error means no OpenTelemetry layer is installed: nothing to join.
        let _ = span.set_parent(Context::new().with_remote_span_context(parent));
    }

    fn traceparent(span: &tracing::Span) -> Option<String> {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
    }

    /// A W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`); `None` if it is not one.
    pub(super) fn parse(traceparent: &str) -> Option<SpanContext> {
        let mut parts = traceparent.split('-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if version != "00" || parts.next().is_some() || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
            return None;
        }
        let trace = TraceId::from_hex(trace).ok()?;
        let span = SpanId::from_hex(span).ok()?;
        let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
        let sc = SpanContext::new(trace, span, flags, true, TraceState::default());
        sc.is_valid().then_some(sc)
    }

    /// The trace of a run kept without a `traceparent`: its id is the run id's 128
    /// bits (a UUID v7 is never all zeros), under a parent span id from its low half.
    fn derived(run_id: RunId) -> SpanContext {
        let bytes = *run_id.0.as_bytes();
        let mut low = [0; 8];
        low.copy_from_slice(&bytes[8..]);
        if low == [0; 8] {
            low[7] = 1;
        }
        SpanContext::new(
            TraceId::from_bytes(bytes),
            SpanId::from_bytes(low),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        )
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_traceparent_reads_back_and_anything_else_is_refused() {
            let sc = parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
            assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
            assert!(sc.is_sampled() && sc.is_remote());
            for bad in [
                "",
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
            ] {
                assert!(parse(bad).is_none(), "{bad:?}");
            }
        }

        #[test]
        fn a_run_without_a_traceparent_has_a_trace_from_its_id() {
            let run_id = RunId::new();
            let sc = derived(run_id);
            assert_eq!(sc.trace_id().to_bytes(), *run_id.0.as_bytes());
            assert!(sc.is_valid());
            assert_eq!(derived(run_id), sc, "the same on every drive");
        }
    }
}
