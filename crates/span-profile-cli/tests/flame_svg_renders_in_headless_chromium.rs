//! The flame graph opens in a real browser: headless Chromium loads the SVG, runs its script,
//! and the frame names are in the resulting DOM.
//!
//! Needs the Debian package `chromium` (/usr/bin/chromium). Without it the test is skipped
//! with a note, except under CI (env `CI` set), where it fails.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const CHROMIUM: &str = "/usr/bin/chromium";

#[test]
fn chromium_renders_the_frames() {
    if !Path::new(CHROMIUM).exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{CHROMIUM} is missing; install the Debian package `chromium`"
        );
        eprintln!("note: skipped, {CHROMIUM} is missing (apt-get install chromium)");
        return;
    }
    let dir = TempDir::new("chromium");
    record_checkout(dir.path(), "1.0");
    let svg = dir.path().join("flame.svg");
    run_ok(
        &[
            "flame",
            s(dir.path()),
            "--trace-id",
            "0000000000000000000000000000feed",
            "-o",
            s(&svg),
        ],
        0,
    );

    let profile = dir.path().join("chromium-profile");
    let out = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            &format!("file://{}", svg.display()),
        ])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !dom.is_empty(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dom.contains("<svg"), "{dom}");
    for f in [
        "parse_date",
        "apply_discount",
        "calculate",
        "render",
        "serve",
    ] {
        assert!(dom.contains(f), "{f} not in the DOM");
    }
    // inferno's script ran: it fills in the details and search elements on load.
    assert!(dom.contains("id=\"frames\""), "{dom}");
}
