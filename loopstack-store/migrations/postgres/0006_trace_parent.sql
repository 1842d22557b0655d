-- OpenTelemetry: the W3C traceparent of the span that created the run, so every drive
-- of it (on any worker, after any restart) is a child of that span, in one trace.
-- NULL for a run created without a trace (and for every run created before this
-- migration): its drives then share a trace derived from the run id.
ALTER TABLE runs ADD COLUMN trace_parent TEXT;
