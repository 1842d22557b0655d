//! The weather example's `--image`: an image shown with the question, and a file that
//! cannot be one is an error (exit status 1) before anything runs.

use std::process::Command;

mod common;

fn weather(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(common::example("weather")).args(["--db", "memory"]).args(args).output().unwrap()
}

#[test]
fn the_weather_example_shows_an_image_and_refuses_a_bad_file() {
    let dir = std::env::temp_dir().join(format!("weather-image-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sky = dir.join("sky.png");
    std::fs::write(&sky, [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d]).unwrap();
    let out = weather(&["--image".as_ref(), sky.as_os_str()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("User: [image image/png]"), "{stdout}");

    let missing = dir.join("missing.png");
    let out = weather(&["--image".as_ref(), missing.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--image") && stderr.contains("cannot read the file"), "{stderr}");
    // Nothing ran: no run id was printed.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("Run "), "{}", String::from_utf8_lossy(&out.stdout));

    let big = dir.join("big.png");
    let mut bytes = std::fs::read(&sky).unwrap();
    bytes.resize(6 * 1024 * 1024, 0);
    std::fs::write(&big, bytes).unwrap();
    let out = weather(&["--image".as_ref(), big.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("over the limit of 5242880 bytes"));
    std::fs::remove_dir_all(&dir).unwrap();
}
