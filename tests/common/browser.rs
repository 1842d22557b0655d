//! A headless Chromium driven through chromedriver, for the tests of pages (Studio,
//! a chat page): found, or skipped where the machine lacks it (never where `CI` is
//! set), started, and the steps a person takes on a page.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// How long the page may take to show what a step waits for: a bound that only
/// ends a broken run of the test, never a speed goal.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// The browser and its driver, or `None` when they are missing outside CI or the
/// test is told to skip outside CI. Where `CI` is set the test never skips: told to,
/// or without the browser, it fails.
pub(crate) fn browser() -> Option<(PathBuf, PathBuf)> {
    let find = |var: &str, default: &str| std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| default.into());
    let chromium = find("LOOPSTACK_CHROMIUM", "/usr/bin/chromium");
    let driver = find("LOOPSTACK_CHROMEDRIVER", "/usr/bin/chromedriver");
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    let told_to_skip = std::env::var("LOOPSTACK_SKIP_BROWSER_TESTS").is_ok_and(|v| v == "1");
    // Straight to the terminal: the test harness shows no output of a test that
    // passes, and a skip should be seen.
    if told_to_skip {
        assert!(
            !ci,
            "LOOPSTACK_SKIP_BROWSER_TESTS=1 where CI is set: CI must run the browser tests, so unset it there"
        );
        let _ = writeln!(std::io::stderr(), "skipped: the browser tests (LOOPSTACK_SKIP_BROWSER_TESTS=1)");
        return None;
    }
    if chromium.exists() && driver.exists() {
        return Some((chromium, driver));
    }
    // On a developer's machine a missing browser skips the test, loudly; CI must run it.
    assert!(
        !ci,
        "the browser tests need {} and {} where CI is set: `apt-get install chromium chromium-driver` (.ci/run \
         does), or set LOOPSTACK_CHROMIUM / LOOPSTACK_CHROMEDRIVER",
        chromium.display(),
        driver.display()
    );
    let _ = writeln!(
        std::io::stderr(),
        "skipped: the browser tests (Studio, the chat page) need {} and {}; install them with \
         `sudo apt-get install chromium chromium-driver` (or set LOOPSTACK_CHROMIUM and LOOPSTACK_CHROMEDRIVER), \
         then run `cargo test --test studio` or `--test frontends --features serve`",
        chromium.display(),
        driver.display()
    );
    None
}

/// Ends the browser when the test ends, however it ends: chromedriver leaves
/// Chromium running when it is killed, so the whole process group goes (the
/// driver leads a group of its own, which Chromium's processes join).
pub(crate) struct Browser(Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-s", "KILL", "--"]).arg(format!("-{}", self.0.id())).status();
        let _ = self.0.wait();
    }
}

/// Starts chromedriver and a headless Chromium session through it.
pub(crate) async fn session(chromium: &Path, driver: &Path, profile: &Path) -> (Browser, Client) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let process = Browser(
        Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
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
pub(crate) async fn until(client: &Client, what: &str, condition: &str) {
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
pub(crate) async fn element(client: &Client, css: &str) -> fantoccini::elements::Element {
    client.wait().at_most(PATIENCE).for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no {css}: {e}"))
}

pub(crate) async fn screenshot(client: &Client, dir: &Path, name: &str) {
    let png = client.screenshot().await.unwrap();
    let path = dir.join(name);
    std::fs::write(&path, png).unwrap();
    eprintln!("screenshot: {}", path.display());
}

/// Does `act` to the element `css`, finding it again when the page drew it anew
/// in between (a run's page does as the run moves), as a person would.
pub(crate) async fn with_element<F, Fut>(client: &Client, css: &str, act: F)
where
    F: Fn(fantoccini::elements::Element) -> Fut,
    Fut: std::future::Future<Output = Result<(), fantoccini::error::CmdError>>,
{
    for _ in 0..20 {
        match act(element(client, css).await).await {
            Ok(()) => return,
            Err(e) if e.is_stale_element_reference() => continue,
            Err(e) => panic!("{css}: {e}"),
        }
    }
    panic!("{css} was drawn anew at every try");
}

/// Types into the element `css` after clearing it, and checks that the field holds
/// what was typed (keys sent while the page drew itself again went nowhere).
pub(crate) async fn fill(client: &Client, css: &str, text: &str) {
    with_element(client, css, |input| async move {
        input.clear().await?;
        input.send_keys(text).await
    })
    .await;
    let script = format!("return document.querySelector({}).value;", Value::from(css));
    let value: Value = client.execute(&script, vec![]).await.unwrap();
    assert_eq!(value.as_str(), Some(text), "what was typed into {css} was lost");
}

pub(crate) async fn click(client: &Client, css: &str) {
    with_element(client, css, |e| async move { e.click().await }).await;
}
