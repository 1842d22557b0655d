//! Studio in a real browser: headless Chromium, driven through chromedriver, works
//! the page of `cargo run --example studio -- serve` over a SQLite file. It starts
//! an expense run with the input form, sees it wait, sends a decision the workflow
//! refuses and sees why, sends one it takes, and sees the run complete on the
//! diagram; it reads a checkpoint, finds the run in the filtered list, and follows
//! the weather agent live as its model writes. Screenshots are saved under
//! `target/tmp/studio/` for review.
//!
//! It needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them), or
//! `LOOPSTACK_CHROMIUM` and `LOOPSTACK_CHROMEDRIVER` naming others. Without them it
//! fails, saying so, unless `LOOPSTACK_SKIP_BROWSER_TESTS=1` says to skip it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

mod common;

/// How long the page may take to show what a step waits for: a bound that only
/// ends a broken run of the test, never a speed goal.
const PATIENCE: Duration = Duration::from_secs(60);

/// A child process killed when the test ends, however it ends.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The browser and its driver, or `None` when told to skip.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let find = |var: &str, default: &str| std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| default.into());
    let chromium = find("LOOPSTACK_CHROMIUM", "/usr/bin/chromium");
    let driver = find("LOOPSTACK_CHROMEDRIVER", "/usr/bin/chromedriver");
    if chromium.exists() && driver.exists() {
        return Some((chromium, driver));
    }
    if std::env::var("LOOPSTACK_SKIP_BROWSER_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: no {} or {} (LOOPSTACK_SKIP_BROWSER_TESTS=1)", chromium.display(), driver.display());
        return None;
    }
    panic!(
        "the Studio test needs {} and {}: `apt-get install chromium chromium-driver` (.ci/run does), \
         or set LOOPSTACK_CHROMIUM / LOOPSTACK_CHROMEDRIVER, or LOOPSTACK_SKIP_BROWSER_TESTS=1 to skip it",
        chromium.display(),
        driver.display()
    );
}

/// Starts `studio serve` on a free port; returns the process and Studio's address.
fn serve(db: &Path) -> (Process, String) {
    let mut child = Command::new(common::example("studio"))
        .arg("--db")
        .arg(db)
        .args(["serve", "--port", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the studio example starts");
    let stderr = child.stderr.take().unwrap();
    let process = Process(child);
    let mut lines = BufReader::new(stderr).lines();
    let address = loop {
        let line = lines.next().expect("serve prints its address").unwrap();
        if let Some(rest) = line.strip_prefix("Studio on ") {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    // The rest of what it says goes to this test's output.
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("serve: {l}")));
    (process, address)
}

/// Starts chromedriver and a headless Chromium session through it.
async fn session(chromium: &Path, driver: &Path, profile: &Path) -> (Process, Client) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let process = Process(
        Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts"),
    );
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1440,1100", format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    // chromedriver takes a moment to listen: ask until it answers.
    let url = format!("http://127.0.0.1:{port}");
    let mut tries = 0;
    let client = loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector).capabilities(capabilities.clone()).connect(&url).await {
            Ok(client) => break client,
            Err(e) if tries < 100 => {
                tries += 1;
                if tries % 20 == 0 {
                    eprintln!("waiting for chromedriver: {e}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no browser session through chromedriver: {e}"),
        }
    };
    (process, client)
}

/// Waits until the page's script `condition` (a JavaScript expression) holds.
async fn until(client: &Client, what: &str, condition: &str) {
    let script = format!("return Boolean({condition});");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if client.execute(&script, vec![]).await.ok().and_then(|v| v.as_bool()) == Some(true) {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            let text: Value = client.execute("return document.body.innerText;", vec![]).await.unwrap_or_default();
            panic!("the page never showed {what} ({condition}); it shows:\n{}", text.as_str().unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An element, once the page shows it.
async fn element(client: &Client, css: &str) -> fantoccini::elements::Element {
    client.wait().at_most(PATIENCE).for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no {css}: {e}"))
}

/// A run as the API reads it, fetched by the page.
async fn api_run(client: &Client, run_id: &str) -> Value {
    let script = format!("return fetch('/api/runs/{run_id}').then((r) => r.json());");
    client.execute(&script, vec![]).await.unwrap()
}

async fn screenshot(client: &Client, dir: &Path, name: &str) {
    let png = client.screenshot().await.unwrap();
    let path = dir.join(name);
    std::fs::write(&path, png).unwrap();
    eprintln!("screenshot: {}", path.display());
}

/// Types into the element `css` after clearing it.
async fn fill(client: &Client, css: &str, text: &str) {
    let input = element(client, css).await;
    input.clear().await.unwrap();
    input.send_keys(text).await.unwrap();
}

async fn click(client: &Client, css: &str) {
    element(client, css).await.click().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_starts_a_run_answers_its_wait_through_the_form_and_follows_it_to_the_end() {
    let Some((chromium, driver)) = browser() else { return };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("studio");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_serve, base) = serve(&dir.join("studio.db"));
    let (_driver, client) = session(&chromium, &driver, &dir.join("profile")).await;

    // Start an expense report from the input form its JSON Schema made.
    client.goto(&format!("{base}#/start/expense")).await.unwrap();
    fill(&client, "form[data-form=input] input[name=employee]", "Linus").await;
    fill(&client, "form[data-form=input] input[name=amount]", "42.5").await;
    fill(&client, "form[data-form=input] input[name=purpose]", "Taxi to the office").await;
    click(&client, "form[data-form=input] button[type=submit]").await;

    // Its page: waiting at `submitted` for a decision, on the diagram too.
    until(&client, "the run waiting", "document.querySelector('.facts [data-status=waiting]')").await;
    until(&client, "the live stream", "document.querySelector('.live-activity[data-following=true]')").await;
    let run_id = element(&client, "code.run-id").await.text().await.unwrap();
    assert!(client.find(Locator::Css(".diagram .node.current[data-place=submitted]")).await.is_ok());
    assert!(client.find(Locator::Css(".diagram .edge.taken[data-transition=submit]")).await.is_ok());
    assert!(client.find(Locator::Css(".diagram .edge.open[data-transition=decide]")).await.is_ok());
    assert!(client.find(Locator::Css(".signal-card[data-signal=revise]")).await.is_ok());
    screenshot(&client, &dir, "1-waiting.png").await;

    // A decision the workflow refuses: the form says why and the run still waits.
    let decide = ".signal-card[data-signal=decide]";
    fill(&client, &format!("{decide} input[name=manager]"), "   ").await;
    click(&client, &format!("{decide} button[type=submit]")).await;
    until(
        &client,
        "why the decision was refused",
        &format!("document.querySelector('{decide} .form-error').textContent.includes(\"manager's name\")"),
    )
    .await;
    let run = api_run(&client, &run_id).await;
    assert_eq!(run["status"], "waiting", "{run}");
    assert_eq!(run["signals"][0]["status"]["status"], "rejected", "{run}");

    // One it takes: the run moves on to its end while the page follows it.
    fill(&client, &format!("{decide} input[name=manager]"), "Grace").await;
    click(&client, &format!("{decide} input[name=approve]")).await;
    fill(&client, &format!("{decide} input[name=comment]"), "Receipt attached").await;
    click(&client, &format!("{decide} button[type=submit]")).await;
    until(&client, "the run completed", "document.querySelector('.facts [data-status=completed]')").await;
    until(&client, "the end on the diagram", "document.querySelector('.diagram .node.current[data-place=end]')").await;
    until(
        &client,
        "the live events of the drive",
        "document.querySelector('.live-activity').textContent.includes('completed')",
    )
    .await;
    for transition in ["submit", "decide", "notify"] {
        let css = format!(".diagram .edge.taken[data-transition={transition}]");
        assert!(client.find(Locator::Css(&css)).await.is_ok(), "{transition} is not marked taken");
    }
    let run = api_run(&client, &run_id).await;
    assert_eq!(run["state"]["decision"], "approved by Grace: Receipt attached", "{run}");
    screenshot(&client, &dir, "2-completed.png").await;

    // Its document and the state at its first checkpoint.
    click(&client, "button[data-tab=documents]").await;
    element(&client, ".document[data-doc='expense_report:report']").await;
    click(&client, "button[data-tab=history]").await;
    click(&client, "tr[data-step='1']").await;
    until(
        &client,
        "the first checkpoint's state",
        "document.querySelector('.checkpoint').textContent.includes('Linus')",
    )
    .await;

    // The runs list, filtered, has it.
    client.goto(&format!("{base}#/?workflow=expense&status=completed")).await.unwrap();
    element(&client, &format!("tr[data-run='{run_id}']")).await;
    until(
        &client,
        "only completed runs",
        "[...document.querySelectorAll('tr[data-status]')].every((r) => r.dataset.status === 'completed')",
    )
    .await;
    screenshot(&client, &dir, "3-runs.png").await;

    // The weather agent, followed live: the model's words stream in, then the
    // conversation and its cost.
    client.goto(&format!("{base}#/start/agent")).await.unwrap();
    fill(&client, "form[data-form=input] textarea[data-path='']", "What is the weather in Oslo?").await;
    click(&client, "form[data-form=input] button[type=submit]").await;
    until(&client, "the agent's answer", "document.querySelector('.facts [data-status=completed]')").await;
    until(
        &client,
        "the answer in a bubble",
        "[...document.querySelectorAll('.bubble.assistant .text')].some((t) => t.textContent.includes('Oslo: mostly sunny'))",
    )
    .await;
    until(
        &client,
        "streamed text",
        "document.querySelector('.live-activity').textContent.includes('the model is writing')",
    )
    .await;
    element(&client, ".bubble.tools .tool-result").await;
    until(
        &client,
        "the cost",
        "document.querySelector('.cost') && document.querySelector('.cost').textContent.includes('$')",
    )
    .await;
    screenshot(&client, &dir, "4-agent.png").await;

    client.close().await.unwrap();
}
