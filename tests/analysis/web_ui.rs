//! `heapsnap serve` in a real headless Chromium, driven over WebDriver (chromedriver): what a
//! person sees on three snapshots of the cache_leak sample. Screenshots go to
//! `target/web_ui/*.png`. Needs Debian's `chromium` and `chromium-driver` (scripts/install-deps.sh).

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::dump_support::series::{lines_of, three_snapshots};
use crate::dump_support::{heapsnap, repo, samples_dir, toolchain_prefix, DiesWithTest, KillOnDrop};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A WebDriver session on a headless Chromium.
struct Browser {
    _driver: KillOnDrop,
    base: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .dies_with_test()
            .spawn()
            .expect("chromedriver (Debian package chromium-driver; scripts/install-deps.sh installs it)");
        let driver = KillOnDrop(driver);
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while ureq::get(&format!("{url}/status")).call().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1280,900",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}}}});
        let session = post(&format!("{url}/session"), &caps);
        let id = session["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {session}")).to_string();
        Browser { _driver: driver, base: format!("{url}/session/{id}"), _profile: profile }
    }

    fn goto(&self, url: &str) {
        post(&format!("{}/url", self.base), &json!({ "url": url }));
    }

    fn run(&self, script: &str) -> Value {
        post(&format!("{}/execute/sync", self.base), &json!({ "script": script, "args": [] }))["value"].clone()
    }

    /// Waits until `script` returns something other than null or false.
    fn wait_for(&self, script: &str, what: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.run(script);
            if !v.is_null() && v != json!(false) {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; page: {}", self.run("return document.body.innerText"));
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The first object row below `(global roots)` in the dominator tree, as displayed, once
    /// the page has opened that row (it opens the roots and the largest root kinds as it
    /// loads: an earlier look may catch another kind's rows); the page is saved as a
    /// screenshot in `shot`.
    fn first_dominator_row(&self, url: &str, shot: &Path) -> String {
        self.goto(&format!("{url}#dominators"));
        let first = self.wait_for(
            "const rows = [...document.querySelectorAll('#dominator-tree tr.tree-row')];
             const g = rows.findIndex(r => r.innerText.includes('(global roots)'));
             if (g < 0 || rows[g].querySelector('.toggle').textContent !== '▾') return null;
             const next = rows[g + 1];
             return next && next.querySelector('a.obj') ? next.innerText : null;",
            "the dominator tree",
        );
        self.screenshot(shot);
        first.as_str().expect("a row's text").to_string()
    }

    fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let shot = ureq::get(&format!("{}/screenshot", self.base)).call().expect("screenshot").into_string().unwrap();
        let v: Value = serde_json::from_str(&shot).unwrap();
        let png = base64::engine::general_purpose::STANDARD.decode(v["value"].as_str().unwrap()).unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = ureq::delete(&self.base).call();
    }
}

fn post(url: &str, body: &Value) -> Value {
    match ureq::post(url).set("Content-Type", "application/json").send_string(&body.to_string()) {
        Ok(r) => serde_json::from_str(&r.into_string().unwrap()).unwrap(),
        Err(ureq::Error::Status(code, r)) => panic!("{url}: {code} {}", r.into_string().unwrap_or_default()),
        Err(e) => panic!("{url}: {e}"),
    }
}

/// Starts `heapsnap serve` and returns it with the URL it prints.
fn serve(snapshots: &[PathBuf]) -> (KillOnDrop, String) {
    let mut child = Command::new(heapsnap())
        .arg("serve")
        .args(snapshots)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .dies_with_test()
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    let running = KillOnDrop(child);
    let line = lines.recv_timeout(Duration::from_secs(300)).expect("the URL line");
    let url = line.split_whitespace().last().unwrap().to_string();
    assert!(url.starts_with("http://127.0.0.1:") && url.contains("/?token="), "{line}");
    (running, url)
}

#[test]
fn the_web_ui_shows_the_leak() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web_ui");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let snaps = three_snapshots(&dir, &[]);
    assert_eq!(snaps.len(), 3);
    let (_server, url) = serve(&snaps);
    let shots = repo().join("target/web_ui");

    // Without the token, nothing.
    let bare = url.split("?token=").next().unwrap().to_string();
    for u in [bare.clone(), format!("{bare}api/summary?s=0"), format!("{bare}?token=0000")] {
        match ureq::get(&u).call() {
            Err(ureq::Error::Status(403, _)) => {}
            other => panic!("{u}: {:?}", other.map(|r| r.status())),
        }
    }

    // What heapsnap itself says is the largest object below the roots of the last snapshot.
    let out = Command::new(heapsnap()).arg("dominators").arg(&snaps[2]).args(["--json", "--depth", "2"]).output().unwrap();
    let tree: Value = serde_json::from_slice(&out.stdout).unwrap();
    let global = tree["children"].as_array().unwrap().iter().find(|k| k["description"] == "(global roots)").expect("global roots");
    let top = &global["children"][0];
    assert_eq!(top["root"], "Cache_leak.1", "{top:#}");
    let top_address = top["address"].as_str().unwrap().to_string();

    let browser = Browser::start();
    let first = browser.first_dominator_row(&url, &shots.join("dominators.png"));
    // Named as the CLI's reports name it (one vocabulary), with its number of entries.
    assert!(first.contains(&top_address) && first.contains("Cache_leak.1") && first.contains("Hashtbl ("), "top row: {first}");

    // Its object view: fields link to objects, the chain goes up to the roots, a path from Cache_leak.1.
    browser.run("document.querySelector('#dominator-tree a.obj').click(); return null;");
    let text = browser.wait_for("return document.querySelector('#fields') ? document.body.innerText : null;", "the object view");
    browser.screenshot(&shots.join("object.png"));
    let text = text.as_str().unwrap();
    assert!(text.contains("Dominator chain") && text.contains("(global roots)") && text.contains("global root Cache_leak.1"), "{text}");
    let links = browser.run("return document.querySelectorAll('#fields a.obj').length;");
    assert!(links.as_u64().unwrap() >= 1, "no field links");

    // The diff: the suspect and its path through the Hashtbl.
    browser.goto(&format!("{url}#diff"));
    let suspect = browser.wait_for("const s = document.querySelector('.suspect'); return s ? s.innerText : null;", "a leak suspect");
    browser.screenshot(&shots.join("diff.png"));
    let suspect = suspect.as_str().unwrap();
    assert!(suspect.contains("Cache_leak.1") && suspect.contains("Hashtbl"), "suspect: {suspect}");

    // The flame graph: the Hashtbl under Cache_leak.1 is a frame nearly as wide as the graph.
    browser.goto(&format!("{url}#flame"));
    let widest = browser.wait_for(
        "const o = document.querySelector('#flame-graph');
         const d = o && o.contentDocument;
         if (!d) return null;
         const frames = [...d.querySelectorAll('g')].filter(g => g.querySelector('title') && g.querySelector('rect'));
         if (!frames.length) return null;
         const hashtbl = frames.filter(g => g.querySelector('title').textContent.startsWith('Hashtbl '));
         if (!hashtbl.length) return 'no Hashtbl frame among ' + frames.length;
         return hashtbl.map(g => g.querySelector('title').textContent + ' | ' + g.querySelector('rect').getAttribute('width')).join('\\n');",
        "the flame graph",
    );
    browser.screenshot(&shots.join("flame.png"));
    let widest = widest.as_str().unwrap();
    let width: f64 = widest.lines().filter_map(|l| l.rsplit_once(" | ")?.1.trim_end_matches('%').parse().ok()).fold(0.0, f64::max);
    assert!(width >= 90.0, "the Hashtbl frame should span the graph: {widest}");

    // The summary opens with the leak suspects: the table, its entries, who holds it, its path;
    // then what only stack frames hold.
    browser.goto(&format!("{url}#summary"));
    browser.wait_for("return document.body.innerText.includes('Largest groups') || null;", "the summary");
    browser.screenshot(&shots.join("summary.png"));
    let first = browser.run("const s = document.querySelector('#suspects .suspect'); return s ? s.innerText : null;");
    let first = first.as_str().unwrap_or_else(|| panic!("no suspect on the summary page: {first}"));
    // The page shows one of the three snapshots: its table's entries, as the CLI counts them.
    let entries = snaps
        .iter()
        .map(|snap| {
            let out = Command::new(heapsnap()).arg("suspects").arg(snap).arg("--json").output().unwrap();
            serde_json::from_slice::<Value>(&out.stdout).unwrap()["suspects"][0]["elements"]["count"].as_u64().unwrap()
        })
        .find(|n| first.contains(&format!("Hashtbl ({n} entries)")))
        .unwrap_or_else(|| panic!("no snapshot's table in: {first}"));
    assert!(
        first.contains(&format!("Hashtbl ({entries} entries)"))
            && first.contains(&format!("{entries} Hashtbl entries"))
            && first.contains("held by Cache_leak.1")
            && first.contains("from global root Cache_leak.1"),
        "suspect: {first}"
    );
    let stack = browser.run("const s = document.querySelector('#stack-only'); return s ? s.innerText : null;");
    assert!(stack.as_str().is_some_and(|t| t.starts_with("Held only by stack frames: ")), "{stack}");
    // Its address links to the object view.
    browser.run("document.querySelector('#suspects .suspect a.obj').click(); return null;");
    let text = browser.wait_for("return document.querySelector('#fields') ? document.body.innerText : null;", "the suspect's object view");
    assert!(text.as_str().unwrap().contains("global root Cache_leak.1"), "{text}");
}

/// With OCaml names (the snapshots taken with `--cmt`), the UI speaks OCaml as the reports do:
/// the dominator tree's top row is the global by its identifier and the table by its type, the
/// object view names the table's fields by their labels, and the diff's suspect says the same.
#[test]
fn the_web_ui_speaks_ocaml_with_names() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web_ui_names");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = toolchain_prefix("5.3.0");
    let cmt = samples_dir().parent().unwrap().join(".build/5.3.0/cmt");
    let snaps = three_snapshots(&dir, &["--ocaml", prefix.to_str().unwrap(), "--cmt", cmt.to_str().unwrap()]);
    assert_eq!(snaps.len(), 3);
    let (_server, url) = serve(&snaps);
    let shots = repo().join("target/web_ui");
    let table = "(string, Cache_leak.entry) Hashtbl.t";

    let browser = Browser::start();
    let first = browser.first_dominator_row(&url, &shots.join("dominators-names.png"));
    assert!(first.contains("Cache_leak.cache") && first.contains(table), "top row: {first}");

    browser.run("document.querySelector('#dominator-tree a.obj').click(); return null;");
    let text = browser.wait_for("return document.querySelector('#fields') ? document.body.innerText : null;", "the object view");
    browser.screenshot(&shots.join("object-names.png"));
    let text = text.as_str().unwrap();
    assert!(text.contains("global root Cache_leak.cache") && text.contains(&format!("type\t{table}")), "{text}");
    // The table's fields by their labels (Hashtbl.t's record: size, data, seed, initial_size).
    let labels = browser.run("return [...document.querySelectorAll('#fields tr')].map(r => r.children[1].innerText);");
    assert_eq!(labels, serde_json::json!([".size", ".data", ".seed", ".initial_size"]), "{text}");

    // The summary's largest groups and the Groups view are by type.
    browser.goto(&format!("{url}#summary"));
    let heading = browser.wait_for(
        "return [...document.querySelectorAll('h2')].map(h => h.innerText).find(t => t.startsWith('Largest groups')) || null;",
        "the summary's groups",
    );
    assert_eq!(heading, "Largest groups by type");
    let suspect = browser.run("const s = document.querySelector('#suspects .suspect'); return s ? s.innerText : null;");
    browser.screenshot(&shots.join("summary-names.png"));
    assert!(
        suspect.as_str().is_some_and(|t| t.contains(table) && t.contains("Hashtbl entries") && t.contains("held by Cache_leak.cache")),
        "{suspect}"
    );
    browser.goto(&format!("{url}#groups"));
    let groups = browser.wait_for(
        "const s = document.querySelector('#group-by'); const t = document.querySelector('main table'); return s && t ? [s.value, t.innerText] : null;",
        "the groups by type",
    );
    browser.screenshot(&shots.join("groups-names.png"));
    assert_eq!(groups[0], "type", "{groups}");
    assert!(groups[1].as_str().unwrap().contains("Cache_leak.entry"), "{groups}");

    browser.goto(&format!("{url}#diff"));
    let suspect = browser.wait_for("const s = document.querySelector('.suspect'); return s ? s.innerText : null;", "a leak suspect");
    browser.screenshot(&shots.join("diff-names.png"));
    let suspect = suspect.as_str().unwrap();
    assert!(suspect.contains("Cache_leak.cache") && suspect.contains(&format!("{table} -> .data ")), "suspect: {suspect}");
}

/// The Sites view, on a snapshot of the alloc_sites sample whose tracker stored call stacks:
/// the leak's line is the first site, named as `top --by site` names it.
#[test]
fn the_web_ui_shows_allocation_sites() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("sites.heapsnap");
    let mut sample =
        crate::dump_support::Sample::start(&samples_dir().join("alloc_sites"), &["--tracker", "callstack", "2000", "--steps", "1"]);
    sample.wait_ready(1);
    crate::dump_support::dump_ok(sample.pid(), &snap, &[]);
    drop(sample);
    let source = std::fs::read_to_string(repo().join("samples/alloc_sites.ml")).unwrap();
    let leak = source.lines().position(|l| l.contains("(* SITE leak *)")).expect("the leak's marker") + 1;
    let top = crate::dump_support::analyse("top", &[&snap], &["--by", "site"]);
    let expected = top["groups"][0]["name"].as_str().unwrap().to_string();
    assert!(expected.starts_with(&format!("alloc_sites.ml:{leak} ")), "{top:#}");

    let (_server, url) = serve(&[snap]);
    let browser = Browser::start();
    browser.goto(&format!("{url}#sites"));
    let first = browser.wait_for("const r = document.querySelector('#sites tbody tr'); return r ? r.innerText : null;", "the sites table");
    browser.screenshot(&repo().join("target/web_ui/sites.png"));
    let first = first.as_str().unwrap();
    assert!(first.contains(&expected) && first.contains("≈"), "first site row: {first} (expected {expected})");
    // Two frames: the leak's line under its caller.
    browser.run("const s = document.querySelector('#site-depth'); s.value = '2'; s.onchange(); return null;");
    let deeper = browser.wait_for(
        "const r = document.querySelector('#sites tbody tr'); return r && r.innerText.includes(' <- ') ? r.innerText : null;",
        "sites by two frames",
    );
    assert!(deeper.as_str().unwrap().contains("Alloc_sites.handle"), "{deeper}");
}

/// Every report of the registry is an API route, `/api/report/NAME`, answering what the
/// command line's `--json` answers for the same snapshot and arguments (no browser needed).
#[test]
fn every_report_is_an_api_route() {
    let dir = tempfile::tempdir().unwrap();
    let snaps = three_snapshots(dir.path(), &[]);
    let (_server, url) = serve(&snaps);
    let (base, token) = url.split_once("/?token=").unwrap();
    let get = |route: &str| -> Result<Value, (u16, String)> {
        match ureq::get(&format!("{base}/api/{route}&token={token}")).call() {
            Ok(r) => Ok(serde_json::from_str(&r.into_string().unwrap()).unwrap()),
            Err(ureq::Error::Status(code, r)) => Err((code, r.into_string().unwrap_or_default())),
            Err(e) => panic!("{route}: {e}"),
        }
    };
    for report in heapsnap_reports::registry::REPORTS {
        let answer = get(&format!("report/{}?s=1", report.name()));
        match report.name() {
            // Arguments of their own, or samples cache_leak has none of.
            "path" | "inspect" | "sites" => assert_eq!(answer.unwrap_err().0, 400, "{}", report.name()),
            name => assert!(answer.is_ok(), "{name}: {answer:?}"),
        }
    }
    let top = get("report/top?s=1&by=root&limit=2").unwrap();
    assert_eq!(top, crate::dump_support::analyse("top", &[&snaps[1]], &["--by", "root", "--limit", "2"]));
    let path = get("report/path?s=2&kind=Hashtbl&limit=1").unwrap();
    assert_eq!(path, crate::dump_support::analyse("path", &[&snaps[2]], &["--kind", "Hashtbl", "--limit", "1"]));
    let diff = get("report/diff?max_suspects=1").unwrap();
    assert_eq!(diff["snapshots"].as_array().unwrap().len(), 3, "diff compares every snapshot served");
    assert_eq!(diff["suspects"].as_array().unwrap().len(), 1, "{diff}");
    assert_eq!(get("report/top?by=colour").unwrap_err().0, 400);
    assert_eq!(get("report/dump?s=0").unwrap_err().0, 404);
    assert_eq!(get("report/summary?s=7").unwrap_err().0, 404);
}
