//! `--keyed`: keyed document saves through the in-memory store.

use std::process::ExitCode;
use std::time::Instant;

use futures::future::BoxFuture;
use loopstack::prelude::*;
use loopstack::{Definition, END, MemoryStore, Runtime, START, Store, TransitionDef, TransitionError};
use serde_json::{Value, json};

use crate::measure::round;

/// Keyed saves: a workflow whose two transitions each save `keys` documents by key.
struct Keyed {
    keys: usize,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Counter {
    n: usize,
}

impl DocumentType for Counter {
    const TYPE: &'static str = "counter";
}

static KEYED: Definition = Definition::new(
    "keyed",
    &[START, "once", END],
    &[TransitionDef::new("first", &[START], "once"), TransitionDef::new("again", &["once"], END)],
);

impl Workflow for Keyed {
    type State = ();
    type Input = ();
    fn definition(&self) -> &'static Definition {
        &KEYED
    }
    fn init(&self, (): ()) {}
    fn guard(&self, _: usize, (): &()) -> bool {
        true
    }
    fn transition<'a>(
        &'a self,
        t: usize,
        (): &'a mut (),
        cx: &'a mut RunContext,
        _: Option<Value>,
    ) -> BoxFuture<'a, Result<(), TransitionError>> {
        Box::pin(async move {
            let started = Instant::now();
            for n in 0..self.keys {
                cx.save_with(&Counter { n }, SaveOptions::new().key(format!("key-{n}")))
                    .map_err(TransitionError::failed)?;
            }
            eprintln!(
                "{}: {} keyed saves in {:.1} ms",
                KEYED.transitions()[t].name,
                self.keys,
                started.elapsed().as_secs_f64() * 1e3
            );
            Ok(())
        })
    }
}

pub(crate) fn keyed(keys: usize) -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let store = MemoryStore::new();
    let runtime = Runtime::with_store(store.clone());
    let started = Instant::now();
    let report = rt.block_on(runtime.start(&Keyed { keys }, ()).into_future());
    let wall = started.elapsed();
    let ok = match &report {
        Ok(report) => rt
            .block_on(store.documents(report.run_id))
            .is_ok_and(|docs| docs.len() == keys && docs.iter().all(|d| d.version == 2)),
        Err(_) => false,
    };
    println!("{}", json!({"workload": "keyed", "keys": keys, "wall_ms": round(wall.as_secs_f64() * 1e3, 1), "ok": ok}));
    if ok { ExitCode::SUCCESS } else { ExitCode::from(2) }
}
