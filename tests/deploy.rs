//! The deployment files in `deploy/` (see docs/src/deploy.md), checked as far as this
//! machine can: the systemd unit verifies with `systemd-analyze` and its command
//! line runs; the Kubernetes manifests' command lines run, their probes' paths
//! answer 200, and their grace periods outlast the drain timeout they give. (The
//! Dockerfile is not built here: no container engine runs on this machine.)
//!
//! Every command runs the `ops` example in place of "my app": the same command
//! line, since both are `loopstack::cli`.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use loopstack::RunId;

mod common;

fn deploy(file: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(file)).unwrap()
}

fn ops() -> PathBuf {
    common::example("ops")
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loopstack-deploy-{name}-{}", RunId::new()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `ops` with `args` until it prints a line starting with `ready` on stderr;
/// hands the line to `check`, then stops it with SIGTERM and asserts it exits 0.
fn run_until_ready(args: &[String], env: &[(&str, &str)], ready: &str, check: impl FnOnce(&str)) {
    let mut process = Command::new(ops())
        .args(args)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(process.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with(ready) {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "{args:?} never said `{ready}`");
    }
    check(&line);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(process.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let status = process.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{args:?}: {status:?}\n{rest}");
}

/// The status code of `GET path` on `address` (HTTP/1.1, plain TCP).
fn get(address: &str, path: &str) -> u16 {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("{response}"))
}

/// The value after `key:` on the first line that has it, as a number.
fn number_after(text: &str, key: &str) -> u64 {
    let line = text.lines().find(|l| l.trim_start().starts_with(key)).unwrap_or_else(|| panic!("no {key}"));
    line.split_once(':').unwrap().1.trim().parse().unwrap()
}

/// The seconds of a `--drain-timeout 25s` in `args`.
fn drain_seconds(args: &[String]) -> u64 {
    let at = args.iter().position(|a| a == "--drain-timeout").expect("a --drain-timeout");
    args[at + 1].strip_suffix('s').unwrap().parse().unwrap()
}

#[test]
fn the_systemd_unit_verifies_and_its_worker_command_runs() {
    let Ok(analyze) = which("systemd-analyze") else {
        assert!(std::env::var_os("CI").is_none(), "CI must verify the unit: install systemd (.ci/run does)");
        eprintln!("skipped: no systemd-analyze; install systemd, then run `cargo test --test deploy`");
        return;
    };
    let unit = deploy("loopstack-worker@.service");
    let dir = temp("systemd");
    let env = dir.join("worker.env");
    let db = dir.join("runs.db");
    std::fs::write(&env, format!("DATABASE_URL={}\n", db.display())).unwrap();
    let exe = ops();
    let instance = dir.join("loopstack-worker@1.service");
    let unit_here = unit
        .replace("/usr/local/bin/my-app", exe.to_str().unwrap())
        .replace("/etc/loopstack/worker.env", env.to_str().unwrap());
    std::fs::write(&instance, &unit_here).unwrap();
    let verified = Command::new(analyze).arg("verify").arg(&instance).output().unwrap();
    let said = String::from_utf8_lossy(&verified.stderr);
    assert!(verified.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");

    // Its command line, as systemd runs it (%H-%i and ${DATABASE_URL} filled in).
    let exec = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).unwrap();
    let args: Vec<String> = exec
        .split_whitespace()
        .skip(1)
        .map(|a| a.replace("${DATABASE_URL}", db.to_str().unwrap()).replace("%H-%i", "host-1"))
        .collect();
    let stop_timeout = number_after(&unit.replace('=', ": "), "TimeoutStopSec");
    assert!(stop_timeout >= drain_seconds(&args) + 5, "systemd waits out the drain before SIGKILL");
    run_until_ready(&args, &[], "worker: driving", |_| {});
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The `args: [...]` of a manifest's container, with `$(DATABASE_URL)` filled in.
fn manifest_args(manifest: &str, db: &Path) -> Vec<String> {
    let line = manifest.lines().find_map(|l| l.trim_start().strip_prefix("args: ")).expect("args");
    let args: Vec<String> = serde_json::from_str(line).unwrap();
    args.into_iter().map(|a| a.replace("$(DATABASE_URL)", db.to_str().unwrap())).collect()
}

#[test]
fn the_kubernetes_manifests_commands_run_and_their_probes_answer() {
    let dir = temp("kubernetes");
    let db = dir.join("runs.db");
    for file in ["workers.yaml", "serve.yaml"] {
        let manifest = deploy(&format!("kubernetes/{file}"));
        let mut args = manifest_args(&manifest, &db);
        let grace = number_after(&manifest, "terminationGracePeriodSeconds");
        assert!(grace >= drain_seconds(&args) + 5, "{file}: the grace period outlasts the drain");
        let paths: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.split_once("path: "))
            .map(|(_, p)| p.split([',', ' ', '}']).next().unwrap())
            .collect();
        assert_eq!(paths, ["/readyz", "/healthz"], "{file}: a readiness and a liveness probe");
        // Here on loopback, on ports the system picks.
        for arg in &mut args {
            if arg == "0.0.0.0:9090" {
                *arg = "127.0.0.1:0".into();
            } else if arg == "0.0.0.0" {
                *arg = "127.0.0.1".into();
            } else if arg == "7878" {
                *arg = "0".into();
            }
        }
        let env = [("LOOPSTACK_TOKEN", "a-token-for-the-test"), ("LOOPSTACK_WORKER_NAME", "pod-1")];
        let ready = if file == "serve.yaml" { "Studio on http://" } else { "worker: metrics on http://" };
        run_until_ready(&args, &env, ready, |line| {
            let address = line.trim_start_matches(ready).split(['/', ' ']).next().unwrap().to_owned();
            for path in &paths {
                assert_eq!(get(&address, path), 200, "{file}: GET {path}");
            }
        });
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn which(program: &str) -> Result<PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file()).ok_or(())
}
