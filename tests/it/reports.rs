//! `--report` and `--trace` from the real binary: the report validates against
//! docs/report-schema.json (with a small validator of the schema subset the document uses),
//! and the trace is trace-event JSON with spans for every stage and thread names.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::schema::{self, errors_of};
use crate::common::{bin, stderr, tempdir};

/// The string `key` of every object in the JSON array `list`.
fn field_of_each<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v[key].as_str().unwrap())
        .collect()
}

fn schema() -> Value {
    schema::load("docs/report-schema.json")
}

// ---- the test ----

/// 6 good slices, a text file (skipped) and a truncated DICOM file (failed).
fn inputs(dir: &Path) -> PathBuf {
    let series = dir.join("series");
    let st = Command::new(bin())
        .args(["-q", "synth", "--size", "64", "--slices", "6"])
        .arg(&series)
        .status()
        .unwrap();
    assert!(st.success());
    let first = std::fs::read_dir(&series)
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let bytes = std::fs::read(&first).unwrap();
    std::fs::write(
        series.join("zz-truncated.dcm"),
        &bytes[..bytes.len() - 2000],
    )
    .unwrap();
    std::fs::write(series.join("notes.txt"), "not DICOM").unwrap();
    series
}

#[test]
fn report_validates_and_trace_has_spans_for_every_stage() {
    let dir = tempdir("reports");
    let series = inputs(&dir);
    let (report, trace) = (dir.join("report.json"), dir.join("trace.json"));
    let out = Command::new(bin())
        .args(["run", "--no-tui", "--writers", "2"])
        .arg(&series)
        .arg("-o")
        .arg(dir.join("out"))
        .arg("--report")
        .arg(&report)
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    let stderr = stderr(&out);
    // The truncated file fails, so the exit code is 1; the summary is printed.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("slices/s") && stderr.contains("errors: 1"),
        "{stderr}"
    );

    // The report against the documented schema.
    let schema = schema();
    let doc: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let errors = errors_of(&schema, &doc);
    assert!(
        errors.is_empty(),
        "report does not match the schema:\n{}",
        errors.join("\n")
    );
    assert_eq!(doc["report_version"], 1);
    assert_eq!(doc["versions"]["dicomflow"], env!("CARGO_PKG_VERSION"));
    // `auto` picks the GPU where one is usable.
    assert!(
        ["cpu", "cuda"].contains(&doc["backend"]["name"].as_str().unwrap_or("")),
        "{}",
        doc["backend"]["name"]
    );
    let files = doc["result"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 8);
    let status = |s: &str| files.iter().filter(|f| f["status"] == s).count();
    assert_eq!(
        (status("ok"), status("skipped"), status("failed")),
        (6, 1, 1)
    );
    let stages = field_of_each(&doc["statistics"]["stages"], "name");
    assert_eq!(
        stages,
        [
            "scan",
            "read+decode",
            "transfer in",
            "gpu decode",
            "compute",
            "gpu encode",
            "transfer out",
            "encode",
            "write"
        ]
    );
    // The process's phases are in order, and the pipeline's clock fits inside them.
    let t = |k: &str| doc["process"][k].as_f64().unwrap();
    assert!(
        t("backend_ready_s") <= t("pipeline_done_s"),
        "{}",
        doc["process"]
    );
    assert!(t("pipeline_done_s") <= t("report_s"), "{}", doc["process"]);
    let elapsed = doc["statistics"]["elapsed"].as_f64().unwrap();
    assert!(elapsed <= t("pipeline_done_s") - t("backend_ready_s") + 0.01);
    // One pool per thread kind that processed slices, and the overlap names the busiest.
    let pools = field_of_each(&doc["statistics"]["pools"], "pool");
    // The CPU backend runs the shared layout (threads that load and finish frames), a GPU
    // loaders and writers.
    let shared = doc["statistics"]["shared_threads"].as_bool().unwrap();
    assert_eq!(shared, doc["result"]["sizing"]["shared"] == true);
    if shared {
        assert!(
            pools.contains(&"shared") && !pools.contains(&"loaders") && !pools.contains(&"writers"),
            "{pools:?}"
        );
    } else {
        assert!(
            pools.contains(&"loaders") && pools.contains(&"writers"),
            "{pools:?}"
        );
    }
    // The CPU backend renders on the writer threads (no render workers); the GPU has workers.
    let on_writers = doc["statistics"]["render_on_writers"].as_bool().unwrap();
    assert_eq!(
        on_writers,
        doc["result"]["sizing"]["workers"] == 0,
        "{}",
        doc["result"]["sizing"]
    );
    assert_eq!(on_writers, doc["backend"]["name"] == "cpu");
    assert_eq!(pools.contains(&"render-workers"), !on_writers, "{pools:?}");
    let busiest = doc["statistics"]["overlap"]["busiest"].as_str().unwrap();
    assert!(pools.contains(&busiest), "{busiest} not in {pools:?}");
    assert!(doc["statistics"]["overlap"]["ratio"].as_f64().unwrap() >= 0.99);
    // Each pool's threads reported their CPU time (Linux accounts it per thread): every
    // thread of the pool, with the reading, writing and rendering of six series slices in it.
    if cfg!(target_os = "linux") {
        for p in doc["statistics"]["pools"].as_array().unwrap() {
            let cpu = &p["cpu"];
            assert!(cpu["threads"].as_u64() >= p["workers"].as_u64(), "{p}");
            let on = cpu["user_s"].as_f64().unwrap() + cpu["system_s"].as_f64().unwrap();
            let fraction = cpu["on_cpu_fraction"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&fraction), "{p}");
            // On a CPU or waiting for one: at most the threads' whole lives.
            if let Some(waiting) = cpu["runqueue_fraction"].as_f64() {
                assert!((0.0..=1.0).contains(&waiting), "{p}");
                // (Two clocks: the kernel's CPU time, the scheduler's wait.)
                assert!(fraction + waiting <= 1.02, "{p}");
            }
            if p["pool"] != "scan" {
                assert!(on > 0.0 && fraction > 0.0, "{p}");
            }
        }
        let finishing = if shared { "shared threads" } else { "writers" };
        assert!(stderr.contains(&format!("cpu: {finishing} (")), "{stderr}");
    }

    // The validator is not vacuous.
    let mut bad = doc.clone();
    bad["result"]["files"][0]["status"] = "fine".into();
    bad["statistics"]["stages"][1]["count"] = "six".into();
    bad.as_object_mut().unwrap().remove("versions");
    assert_eq!(
        errors_of(&schema, &bad).len(),
        3,
        "{:?}",
        errors_of(&schema, &bad)
    );

    // The trace: trace-event JSON, complete spans for every stage, named threads.
    let t: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().expect("traceEvents");
    for e in events {
        assert!(e["ph"].is_string() && e["pid"].is_number() && e["name"].is_string());
    }
    let spans: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    for s in &spans {
        assert!(s["ts"].as_f64().unwrap() >= 0.0 && s["dur"].as_f64().unwrap() >= 0.0);
        assert!(s["tid"].is_number());
    }
    for stage in ["read+decode", "compute", "encode", "write"] {
        // One span per frame; read+decode also has one per file for its header.
        let n = spans
            .iter()
            .filter(|s| s["cat"] == stage && !s["name"].as_str().unwrap().ends_with(" header"))
            .count();
        assert_eq!(n, 6, "spans for {stage}");
    }
    let headers = spans
        .iter()
        .filter(|s| s["cat"] == "read+decode" && s["name"].as_str().unwrap().ends_with(" header"))
        .count();
    assert!(headers >= 1, "header spans: {headers}");
    // The scan looks at every file, images or not.
    assert_eq!(
        spans.iter().filter(|s| s["cat"] == "scan").count(),
        8,
        "scan spans"
    );
    let threads: Vec<_> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    // Shared threads ("work-") load and write; render workers exist unless the writing
    // threads render.
    for (prefix, expected) in [
        ("load-", !shared),
        ("write-", !shared),
        ("work-", shared),
        ("render-", !on_writers),
    ] {
        assert_eq!(
            threads.iter().any(|t| t.starts_with(prefix)),
            expected,
            "{prefix} in {threads:?}"
        );
    }
    // Compute spans are on the render workers, or on the threads that write.
    let compute_thread = match (on_writers, shared) {
        (false, _) => "render-",
        (true, false) => "write-",
        (true, true) => "work-",
    };
    for s in spans.iter().filter(|s| s["cat"] == "compute") {
        assert!(events.iter().any(|e| e["name"] == "thread_name"
            && e["tid"] == s["tid"]
            && e["args"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(compute_thread))));
    }
    // Every span's thread has a name.
    for s in &spans {
        assert!(events
            .iter()
            .any(|e| e["name"] == "thread_name" && e["tid"] == s["tid"]));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_live_report_validates_and_counts_every_arrival() {
    let dir = tempdir("reports-live");
    let series = inputs(&dir);
    let report = dir.join("report.json");
    let config = dir.join("watch.toml");
    // Give up on incomplete files at once: the truncated one is reported, not awaited.
    std::fs::write(&config, "[watch]\nsettle_ms = 50\ngive_up_s = 1\n").unwrap();
    let out = dir.join("out");
    let mut child = Command::new(bin())
        .args(["watch", "--no-tui", "-q", "-c"])
        .arg(&config)
        .arg("-o")
        .arg(&out)
        .arg("--report")
        .arg(&report)
        .arg(&series)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let rendered = || {
        std::fs::read_dir(&out)
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "png")
                })
                .count()
            })
            .unwrap_or(0)
    };
    while rendered() < 6 && t0.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The truncated file waits give_up_s before it is handed on and fails.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // SAFETY: sends SIGTERM to the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "watch exited with {status}");
    let doc: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let errors = errors_of(&schema(), &doc);
    assert!(errors.is_empty(), "{errors:#?}");
    let live = &doc["live"];
    assert_eq!(live["arrivals"], 8, "{live}");
    assert_eq!(
        (
            live["rendered"].as_u64(),
            live["skipped"].as_u64(),
            live["failed"].as_u64()
        ),
        (Some(6), Some(1), Some(1))
    );
    let totals = &doc["result"]["totals"];
    assert_eq!(
        (totals["files"].as_u64(), totals["files_ok"].as_u64()),
        (Some(8), Some(6))
    );
    // Only the failed file is listed.
    let files = doc["result"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0]["path"]
        .as_str()
        .unwrap()
        .ends_with("zz-truncated.dcm"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn report_dash_goes_to_standard_output() {
    let dir = tempdir("report-stdout");
    let series = inputs(&dir);
    let out = Command::new(bin())
        .current_dir(&dir)
        .args(["run", "--no-tui", "--report", "-"])
        .arg(&series)
        .arg("-o")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    // One failed input: exit 1, the report still written.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is the JSON report");
    assert_eq!(report["result"]["files"].as_array().unwrap().len(), 8);
    assert!(errors_of(&schema(), &report).is_empty());
    // The summary stays on standard error, and no file is named "-".
    assert!(stderr(&out).contains("file(s)"), "{}", stderr(&out));
    assert!(!dir.join("-").exists());
}
