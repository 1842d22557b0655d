//! The schedules' endpoints: list, create, pause, resume and delete, under the
//! same token, Host and Origin rules as every endpoint.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use loopstack_core::schedule::{Missed, Overlap, Schedule, ScheduleError, parse_interval};
use loopstack_core::serde_json::{Value, json};
use loopstack_core::{ScheduleRecord, StoreError};

use super::{App, BodyJson, PathJson, error, json_body, ok};

/// A schedule as the API writes it: [`crate::views::schedule`], with the status
/// of its last run.
async fn view(app: &App, s: &ScheduleRecord) -> Value {
    let mut value = crate::views::schedule(s);
    if let Some(run) = s.last_run {
        value["last_run_status"] = match app.runtime.store().load_run(run).await {
            Ok(record) => json!(record.status.as_str()),
            Err(_) => Value::Null,
        };
    }
    value
}

fn schedule_error(e: &ScheduleError) -> Response {
    let status = match e {
        ScheduleError::UnknownWorkflow { .. } | ScheduleError::Store(StoreError::ScheduleNotFound(_)) => {
            StatusCode::NOT_FOUND
        }
        ScheduleError::Store(StoreError::ScheduleExists(_)) => StatusCode::CONFLICT,
        ScheduleError::Store(e) => return super::store_error(e),
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    error(status, e)
}

pub(super) async fn list(State(app): State<App>) -> Response {
    match app.runtime.schedules().await {
        Ok(schedules) => {
            let mut list = Vec::with_capacity(schedules.len());
            for s in &schedules {
                list.push(view(&app, s).await);
            }
            ok(&app, StatusCode::OK, json!({ "schedules": list }))
        }
        Err(e) => super::store_error(&e),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    id: String,
    workflow: String,
    #[serde(default)]
    input: Value,
    /// A cron expression, or
    cron: Option<String>,
    /// an interval (`15m`).
    every: Option<String>,
    timezone: Option<String>,
    #[serde(default)]
    missed: Option<String>,
    /// `skip` (unless given), `allow` or `queue`.
    #[serde(default)]
    overlap: Option<String>,
    grace: Option<String>,
    #[serde(default)]
    paused: bool,
}

impl CreateBody {
    fn schedule(&self) -> Result<Schedule, ScheduleError> {
        let mut schedule = match (&self.cron, &self.every) {
            (Some(cron), None) => Schedule::cron(cron)?,
            (None, Some(every)) => Schedule::every(parse_interval(every)?)?,
            _ => {
                return Err(ScheduleError::InvalidCron {
                    expr: self.cron.clone().unwrap_or_default(),
                    reason: "give one of `cron` and `every`".to_owned(),
                });
            }
        };
        if let Some(timezone) = &self.timezone {
            schedule = schedule.timezone(timezone)?;
        }
        if let Some(missed) = &self.missed {
            schedule = schedule.missed(missed.parse::<Missed>()?);
        }
        if let Some(overlap) = &self.overlap {
            schedule = schedule.overlap(overlap.parse::<Overlap>()?);
        }
        if let Some(grace) = &self.grace {
            schedule = schedule.grace(parse_interval(grace)?);
        }
        if self.paused {
            schedule = schedule.paused();
        }
        Ok(schedule)
    }
}

pub(super) async fn create(State(app): State<App>, BodyJson(body): BodyJson) -> Response {
    let body: CreateBody = match json_body(&body) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let schedule = match body.schedule() {
        Ok(s) => s,
        Err(e) => return schedule_error(&e),
    };
    match app.runtime.schedule(&body.id, &body.workflow, body.input, schedule).await {
        Ok(stored) => {
            let value = view(&app, &stored).await;
            ok(&app, StatusCode::CREATED, value)
        }
        Err(e) => schedule_error(&e),
    }
}

pub(super) async fn pause(State(app): State<App>, PathJson(id): PathJson<String>) -> Response {
    changed(&app, app.runtime.pause_schedule(&id).await).await
}

pub(super) async fn resume(State(app): State<App>, PathJson(id): PathJson<String>) -> Response {
    changed(&app, app.runtime.resume_schedule(&id).await).await
}

async fn changed(app: &App, result: Result<ScheduleRecord, ScheduleError>) -> Response {
    match result {
        Ok(s) => {
            let value = view(app, &s).await;
            ok(app, StatusCode::OK, value)
        }
        Err(e) => schedule_error(&e),
    }
}

pub(super) async fn delete(State(app): State<App>, PathJson(id): PathJson<String>) -> Response {
    match app.runtime.delete_schedule(&id).await {
        Ok(()) => ok(&app, StatusCode::OK, json!({ "id": id, "deleted": true })),
        Err(e) => schedule_error(&e),
    }
}
