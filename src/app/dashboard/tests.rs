//! Render tests: fixed statistics snapshots drawn with ratatui's `TestBackend`, asserting on
//! the text of the buffer.

use std::path::PathBuf;
use std::time::Duration;

use ratatui::backend::TestBackend;
use ratatui::Terminal;

use crate::app::config::TuiMode;
use dicomflow::observe::stats::{
    ErrorEntry, GaugeSnapshot, GpuFigures, Snapshot, StageId, StageSnapshot,
};

use super::app::{App, Progress, Rates};
use super::draw::draw;
use super::Display;

/// A run 2 s in: 120 of 200 frames, encode the busiest stage, CPU backend.
fn snapshot(elapsed_s: f64, done: u64) -> Snapshot {
    let stage = |id: StageId, count: u64, workers: u64, busy: f64, p50: f64| StageSnapshot {
        name: id.name().to_string(),
        count,
        workers,
        busy_s: busy * elapsed_s * workers as f64,
        busy_fraction: busy,
        throughput: count as f64 / elapsed_s,
        p50_ms: p50,
        p95_ms: p50 * 2.0,
        p99_ms: p50 * 3.0,
        max_ms: p50 * 5.0,
        mean_ms: p50 * 1.1,
        histogram: None,
    };
    let stages = vec![
        stage(StageId::Scan, 200, 1, 0.01, 0.01),
        stage(StageId::ReadDecode, done + 10, 1, 0.40, 1.25),
        StageSnapshot {
            name: "transfer in".into(),
            ..Default::default()
        },
        StageSnapshot {
            name: "gpu decode".into(),
            ..Default::default()
        },
        stage(StageId::Compute, done + 5, 1, 0.20, 0.75),
        StageSnapshot {
            name: "gpu encode".into(),
            ..Default::default()
        },
        StageSnapshot {
            name: "transfer out".into(),
            ..Default::default()
        },
        stage(StageId::Encode, done + 2, 2, 0.92, 14.5),
        stage(StageId::Write, done, 2, 0.10, 0.33),
    ];
    Snapshot {
        elapsed: Duration::from_secs_f64(elapsed_s),
        stages,
        pools: Vec::new(),
        render_on_writers: false,
        shared_threads: false,
        overlap: None,
        latency: stage(StageId::Write, done, 1, 0.0, 20.0),
        gauges: vec![
            GaugeSnapshot {
                name: "scan → load".into(),
                current: 80,
                capacity: 256,
            },
            GaugeSnapshot {
                name: "load → render".into(),
                current: 1,
                capacity: 10,
            },
            GaugeSnapshot {
                name: "render → write".into(),
                current: 9,
                capacity: 10,
            },
            GaugeSnapshot {
                name: "slots in flight".into(),
                current: 10,
                capacity: 10,
            },
        ],
        error_count: 0,
        recent_errors: vec![],
        backend: "cpu".into(),
        gpu: None,
        files_found: 200,
        files_skipped: 0,
        files_failed: 0,
        frames_planned: 130,
        frames_done: done,
        frames_failed: 0,
        frames_existing: 0,
        bytes_in: 52_428_800,
        bytes_out: 13_000_000,
        gpu_encoded_frames: 0,
        gpu_encoded_bytes: 0,
        paused: false,
        finished: false,
        scan_done: true,
    }
}

fn with_errors(mut s: Snapshot) -> Snapshot {
    let reasons = [
        ("/data/ct/IM0007.dcm", "decode", "truncated pixel data"),
        (
            "/data/ct/IM0042.dcm",
            "decode",
            "unsupported transfer syntax 1.2.3",
        ),
        (
            "/data/ct/IM0099.dcm",
            "write",
            "out/IM0099.png: No space left on device",
        ),
    ];
    for (p, stage, reason) in reasons {
        s.recent_errors.push(ErrorEntry {
            path: PathBuf::from(p),
            stage: stage.into(),
            reason: reason.into(),
        });
    }
    s.error_count = 3;
    s.frames_failed = 3;
    s
}

fn render(app: &App, w: u16, h: u16) -> Vec<String> {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| draw(f, app)).unwrap();
    let buf = term.backend().buffer();
    (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
        })
        .collect()
}

/// The first line whose text (after a border and a marker) starts with `needle`.
fn row<'a>(lines: &'a [String], needle: &str) -> &'a str {
    lines
        .iter()
        .find(|l| {
            l.trim_start_matches(['│', ' ', '▶', '┌', '─'])
                .starts_with(needle)
        })
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{}", lines.join("\n")))
}

fn numbers(line: &str) -> Vec<f64> {
    line.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.parse().ok())
        .collect()
}

fn app(s: Snapshot) -> App {
    App::new(s, Some(super::log_file_for(std::path::Path::new("out"))))
}

#[test]
fn full_frame_100x30_shows_every_panel() {
    let lines = render(&app(snapshot(2.0, 120)), 100, 30);
    let all = lines.join("\n");
    assert_eq!(lines.len(), 30);
    for name in [
        "scan",
        "read+decode",
        "transfer in",
        "compute",
        "transfer out",
        "encode",
        "write",
    ] {
        assert!(all.contains(name), "{name} missing:\n{all}");
    }
    // Stage rows carry their numbers: slices, slices/s, p50, p95, p99, max, busy.
    let enc = numbers(row(&lines, "encode"));
    assert_eq!(enc[..3], [122.0, 61.0, 14.5], "{enc:?}");
    assert!(row(&lines, "encode").contains("92%"));
    // The bottleneck is marked in the row and named in the title.
    assert!(all.contains("▶encode"), "{all}");
    assert!(all.contains("bottleneck: encode"));
    // Transfers do not exist on the CPU backend.
    assert!(numbers(row(&lines, "transfer in")).is_empty());
    // Progress with ETA: 80 left at 60 fr/s → 1.3 s, shown rounded up.
    assert!(all.contains("frames 120/200 (60%)"), "{all}");
    assert!(all.contains("ETA 0:00:02"), "{all}");
    // Queues and slot ring.
    assert!(row(&lines, "load → render").contains("1/10"));
    assert!(row(&lines, "slots in flight").contains("10/10"));
    assert!(all.contains("Throughput fr/s"));
    assert!(all.contains("CPU backend"));
    assert!(all.contains("render workers: 1"), "{all}");
    assert!(all.contains("Errors (0)"));
    assert!(all.contains("log: out/.dicomflow/dicomflow.log"));
    assert!(all.contains("RUNNING"));
}

#[test]
fn cpu_panel_says_when_the_writers_render() {
    let mut s = snapshot(2.0, 120);
    s.render_on_writers = true;
    s.stages[StageId::Compute as usize].workers = 2;
    let all = render(&app(s), 100, 30).join("\n");
    assert!(all.contains("rendering on 2 writer threads"), "{all}");
    assert!(!all.contains("render workers:"), "{all}");

    let mut s = snapshot(2.0, 120);
    (s.render_on_writers, s.shared_threads) = (true, true);
    s.stages[StageId::Compute as usize].workers = 2;
    let all = render(&app(s), 100, 30).join("\n");
    assert!(all.contains("2 shared threads, load to write"), "{all}");
}

#[test]
fn small_terminal_80x24_with_errors_stays_readable() {
    let lines = render(&app(with_errors(snapshot(2.0, 120))), 80, 24);
    let all = lines.join("\n");
    println!("{all}"); // cargo test -- --nocapture shows the frame
    assert_eq!(lines.len(), 24);
    assert!(lines.iter().all(|l| l.chars().count() == 80));
    for name in ["read+decode", "compute", "encode", "write"] {
        let r = row(&lines, name);
        assert!(numbers(r).len() >= 6, "{name}: {r}");
    }
    assert!(row(&lines, "stage").contains("p99 ms"));
    assert!(all.contains("Errors (3)"), "{all}");
    // Newest first; as many as fit (3 rows in the bottom panel at 24 rows).
    assert!(
        all.contains("ct/IM0099.dcm: write: out/IM0099.png"),
        "{all}"
    );
    assert!(all.contains("ct/IM0042.dcm: decode: unsupported"), "{all}");
    assert!(all.contains("ct/IM0007.dcm: decode: truncated"), "{all}");
    assert!(all.contains("errors 3"));
    assert!(all.contains("render → write"));
    assert!(lines[23].contains("q") && lines[23].contains("pause"));
}

#[test]
fn gpu_panel_shows_devices_strategy_pools_and_split() {
    let mut s = snapshot(2.0, 120);
    s.backend = "cuda (zero-copy)".into();
    s.stages[StageId::TransferIn as usize] = StageSnapshot {
        name: "transfer in".into(),
        count: 125,
        workers: 2,
        busy_s: 0.5,
        ..Default::default()
    };
    s.stages[StageId::Compute as usize].busy_s = 1.0;
    s.stages[StageId::TransferOut as usize] = StageSnapshot {
        name: "transfer out".into(),
        count: 125,
        workers: 2,
        busy_s: 0.5,
        ..Default::default()
    };
    s.gpu = Some(GpuFigures {
        devices: vec!["NVIDIA H200".into()],
        strategy: "zero-copy".into(),
        pools: vec![[256 << 20, 64 << 20, 512 << 20, 128 << 20]],
        pinned_bytes: 32 << 20,
        pinned_alloc_ms: 12.0,
        frames_per_device: vec![125],
        encoder: "GPU, nvCOMP 6.0.0".into(),
        ..Default::default()
    });
    s.gpu_encoded_frames = 125;
    s.gpu_encoded_bytes = 125 * 260_000;
    let all = render(&app(s), 100, 30).join("\n");
    assert!(all.contains(" GPU "), "{all}");
    assert!(all.contains("0: NVIDIA H200  125 fr"), "{all}");
    assert!(all.contains("transfer: zero-copy"));
    assert!(all.contains("encoder: GPU, nvCOMP 6.0.0"), "{all}");
    assert!(all.contains("GPU encoded: 125 fr, 260 KB/fr"), "{all}");
    assert!(all.contains("pool 0: 67/268 MB used/rsv"), "{all}");
    assert!(all.contains("H2D 25% | kernel 50% | D2H 25%"), "{all}");
    assert!(!all.contains("CPU backend"));
}

#[test]
fn tiny_terminal_keeps_the_stage_table() {
    let lines = render(&app(snapshot(2.0, 120)), 60, 15);
    let all = lines.join("\n");
    assert!(all.contains("encode") && all.contains("write"), "{all}");
    assert!(!all.contains("p99 ms"), "compact table drops p99/max");
    assert!(numbers(row(&lines, "read+decode")).len() >= 4);
}

#[test]
fn help_overlay_and_states() {
    let mut a = app(snapshot(2.0, 120));
    a.help = true;
    let all = render(&a, 80, 24).join("\n");
    assert!(all.contains("Help"), "{all}");
    assert!(all.contains("pause / resume loading"));
    a.help = false;
    a.cancelling = true;
    assert!(render(&a, 80, 24)[0].contains("FINISHING"));
    let mut s = snapshot(2.0, 120);
    s.paused = true;
    assert!(render(&app(s), 80, 24)[0].contains("PAUSED"));
}

#[test]
fn recent_rates_come_from_successive_snapshots() {
    let mut a = app(snapshot(1.0, 100));
    a.update(snapshot(2.0, 150));
    // 50 frames in the last second, 50 left → ETA 1 s.
    let p = a.progress();
    assert!((p.per_s - 50.0).abs() < 1e-9, "{}", p.per_s);
    assert_eq!(p.eta, Some(Duration::from_secs(1)));
    assert_eq!(a.spark().back(), Some(&50));
    assert_eq!(
        Progress::of(&snapshot(2.0, 120), &Rates::default()).line(),
        "frames 120/200 (60%) 60 fr/s ETA 0:00:02 errors 0"
    );
}

#[test]
fn the_total_says_scanning_until_the_scan_ends() {
    // The scan has found 200 files so far: neither that total nor an ETA from it is true yet.
    let mut s = snapshot(2.0, 120);
    s.scan_done = false;
    let p = Progress::of(&s, &Rates::default());
    assert_eq!(p.eta, None);
    assert_eq!(p.line(), "frames 120/scanning… 60 fr/s ETA - errors 0");
    let all = render(&app(s), 100, 30).join("\n");
    assert!(all.contains("frames 120/scanning…"), "{all}");
    assert!(!all.contains("(60%)"), "{all}");
}

#[test]
fn display_choice() {
    use Display::*;
    assert_eq!(Display::choose(TuiMode::Auto, false, true), Tui);
    assert_eq!(
        Display::choose(TuiMode::Auto, false, false),
        Progress { tty: false }
    );
    assert_eq!(Display::choose(TuiMode::Auto, true, true), Quiet);
    assert_eq!(Display::choose(TuiMode::On, true, false), Tui);
    assert_eq!(
        Display::choose(TuiMode::Off, false, true),
        Progress { tty: true }
    );
    assert_eq!(Display::choose(TuiMode::Off, true, true), Quiet);
}

#[test]
fn error_reasons_wrap_when_there_is_room() {
    let lines = render(&app(with_errors(snapshot(2.0, 120))), 100, 30);
    let all = lines.join("\n");
    assert!(all.contains("Errors (3)"));
    // The whole of each reason is there, over several lines.
    for end in ["device", "syntax 1.2.3", "truncated pixel data"] {
        assert!(all.contains(end), "{end} missing:\n{all}");
    }
}

#[test]
fn supervise_returns_the_result_samples_counters_and_resumes_panics() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use dicomflow::observe::stats::Stats;
    use dicomflow::observe::trace::Tracer;

    use super::{supervise, Options};

    let stats = Stats::new();
    stats.add_gauge("slots in flight", Box::new(|| (1, 4)));
    stats.add_gauge("load → render", Box::new(|| (2, 8)));
    let cancel = Arc::new(AtomicBool::new(false));
    let dir = std::env::temp_dir().join(format!("dicomflow-supervise-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tracer = Arc::new(Tracer::create(&dir.join("t.json")).unwrap());
    let opts = Options {
        display: Display::Quiet,
        tick: Duration::from_millis(10),
        log_file: PathBuf::from("unused.log"),
        live: None,
    };
    let started = std::time::Instant::now();
    let r = supervise(&opts, &stats, &cancel, Some(&tracer), || {
        std::thread::sleep(Duration::from_millis(60));
        42
    });
    assert_eq!(r.unwrap(), 42);
    assert!(started.elapsed() < Duration::from_millis(1000));
    tracer.finish().unwrap();
    let t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("t.json")).unwrap()).unwrap();
    let counters: Vec<_> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C")
        .collect();
    assert!(counters.iter().any(|c| c["name"] == "slot ring"));
    assert!(counters
        .iter()
        .any(|c| c["name"] == "queue depth" && c["args"]["load → render"] == 2.0));
    let _ = std::fs::remove_dir_all(&dir);

    let panicked = std::panic::catch_unwind(|| {
        supervise(&opts, &stats, &cancel, None, || -> u32 { panic!("boom") })
    });
    assert!(panicked.is_err());
}

#[test]
fn a_live_run_shows_arrivals_latency_associations_and_senders_and_no_eta() {
    use dicomflow::source::live::{LiveSnapshot, SenderCounts};
    let mut l = LiveSnapshot {
        arrivals: 100,
        pending: 3,
        associations_open: 2,
        associations_total: 5,
        associations_refused: 1,
        refused: 2,
        rendered: 95,
        skipped: 1,
        failed: 1,
        latency_ms: Some([4.1, 6.0, 9.2, 20.0]),
        elapsed_s: 1.0,
        ..Default::default()
    };
    l.senders.insert(
        "CT1@10.0.0.5".into(),
        SenderCounts {
            received: 60,
            refused: 2,
            bytes: 31_000_000,
        },
    );
    l.senders.insert(
        "PACS@10.0.0.9".into(),
        SenderCounts {
            received: 40,
            refused: 0,
            bytes: 20_000_000,
        },
    );
    let mut live = super::app::Live::default();
    live.update(l.clone());
    l.elapsed_s = 2.0;
    l.arrivals = 160;
    live.update(l);
    // 60 arrivals in the last second.
    assert_eq!(live.arrivals_per_s(), 60.0);
    let line = live.line(0);
    assert!(
        line.starts_with("arrivals 160 (60/s) rendered 95 waiting 3 latency 4.10/6.00/9.20 ms"),
        "{line}"
    );
    assert!(!line.contains("ETA"));
    let mut a = app(snapshot(2.0, 120));
    a.live = Some(live);
    let lines = render(&a, 110, 32);
    let all = lines.join("\n");
    for want in [
        "LIVE",
        "arrivals 160 (60/s)",
        "Ingest",
        "assoc 2 open, 5 total, 1 refused",
        "latency 4.10/6.00/9.20 ms",
        "CT1@10.0.0.5  60 (31.0 MB)  refused 2",
        "PACS@10.0.0.9  40",
    ] {
        assert!(all.contains(want), "no {want:?} in\n{all}");
    }
    assert!(!all.contains("ETA"), "{all}");
    assert!(!all.contains("frames 120/200"), "{all}");
}

#[test]
fn gpu_panel_shows_the_decode_counts_and_the_stage_row_appears_once_used() {
    let mut s = snapshot(2.0, 120);
    let rows = render(&app(s.clone()), 100, 30).join("\n");
    assert!(!rows.contains("gpu decode"), "{rows}");
    s.stages[StageId::GpuDecode as usize] = StageSnapshot {
        name: "gpu decode".into(),
        count: 118,
        workers: 16,
        busy_s: 10.0,
        busy_fraction: 0.3,
        p50_ms: 9.3,
        ..Default::default()
    };
    s.gpu = Some(GpuFigures {
        devices: vec!["NVIDIA H200".into()],
        strategy: "zero-copy".into(),
        frames_per_device: vec![120],
        codecs: "nvJPEG2000 0.11.0, nvJPEG 13.0.1".into(),
        frames_gpu_decoded: 118,
        frames_decode_fallback: 2,
        frames_uploaded: 0,
        ..Default::default()
    });
    let all = render(&app(s), 100, 30).join("\n");
    assert!(
        numbers(row(
            &all.lines().map(String::from).collect::<Vec<_>>(),
            "gpu decode"
        ))
        .starts_with(&[118.0]),
        "{all}"
    );
    assert!(all.contains("decode: 118 GPU, 2 CPU fallback"), "{all}");
    assert!(all.contains("codecs: nvJPEG2000 0.11.0"), "{all}");
}
