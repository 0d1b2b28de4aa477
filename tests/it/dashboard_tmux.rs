//! The dashboard of the real binary in a real terminal (tmux): the stage names appear with
//! numbers, `q` ends the run cleanly (in-flight slices finished, nothing partial), the summary
//! is printed, the exit code is 0, and the terminal is back to normal (primary screen, cooked
//! mode). Skips, saying so, when tmux is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{assert_exit, bin, repo_path, tempdir};

const STAGES: [&str; 4] = ["read+decode", "compute", "encode", "write"];

struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux")
    }

    fn capture(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// Waits until `pred` holds for the pane's text; returns that text.
    fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let text = self.capture();
            if pred(&text) {
                return text;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for {what}; the pane shows:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // Our own server on our own socket.
        let _ = self.cmd(&["kill-server"]);
    }
}

fn have_tmux() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The bundled sample (assets/sample), if it is there.
fn bundled_sample() -> Option<PathBuf> {
    let bundled = repo_path("assets/sample");
    let has_files = std::fs::read_dir(&bundled).is_ok_and(|mut d| d.next().is_some());
    has_files.then_some(bundled)
}

/// A generated 200-slice 512×512 series.
fn generated_sample(dir: &Path) -> PathBuf {
    let out = dir.join("sample");
    let st = Command::new(bin())
        .args(["-q", "synth", "--size", "512", "--slices", "200"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    out
}

/// A stage row with numbers: its name, then a slice count above zero and more figures.
fn stage_has_numbers(text: &str, stage: &str) -> bool {
    text.lines().any(|l| {
        l.find(stage).is_some_and(|i| {
            let nums: Vec<f64> = l[i + stage.len()..]
                .split_whitespace()
                .filter_map(|w| w.trim_end_matches('%').parse::<f64>().ok())
                .collect();
            nums.len() >= 5 && nums[0] > 0.0
        })
    })
}

/// What one run in tmux showed.
struct Seen {
    frame: String,
    after: String,
    alternate_during: String,
    alternate_after: String,
}

/// Runs the dashboard on `input` in tmux, presses q once every stage shows numbers. None when
/// the run ended before that (the input was too small to watch).
fn drive(input: &Path, out: &Path, socket: &str) -> Option<Seen> {
    let _ = std::fs::remove_dir_all(out);
    // Slow enough to watch with ordinary knobs: one loader, one writer, best PNG compression.
    let run = format!(
        "'{}' run '{}' -o '{}' --tui --loaders 1 --writers 1 --png-compression best",
        bin(),
        input.display(),
        out.display()
    );
    let script = format!(
        "{run}; echo EXIT_CODE=$?; stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon \
         | sed 's/^/STTY=/'; sleep 600"
    );
    let tmux = Tmux {
        socket: socket.to_string(),
    };
    let st = tmux.cmd(&[
        "new-session",
        "-d",
        "-x",
        "100",
        "-y",
        "30",
        "-s",
        "t",
        "sh",
        "-c",
        &script,
    ]);
    assert_exit(&st, 0);
    let alternate = || {
        String::from_utf8_lossy(
            &tmux
                .cmd(&["display", "-p", "-t", "t", "#{alternate_on}"])
                .stdout,
        )
        .trim()
        .to_string()
    };

    // The dashboard (its panel titles; the summary has none): every stage with numbers.
    let frame = tmux.wait_for("the dashboard", Duration::from_secs(60), |t| {
        t.contains("STTY=")
            || (t.contains("Stages")
                && t.contains("Queues")
                && STAGES.iter().all(|s| stage_has_numbers(t, s)))
    });
    if frame.contains("STTY=") {
        return None;
    }
    let alternate_during = alternate();
    if alternate_during != "1" {
        // Either the run is ending on its own (a loaded machine, a small input: it left the
        // alternate screen between the capture and the question, and its shell will print
        // STTY= shortly), which is too soon to press q like the case above, or the dashboard
        // never used the alternate screen, which the caller's assertion reports.
        let ended = std::iter::repeat_with(|| {
            std::thread::sleep(Duration::from_millis(100));
            tmux.capture().contains("STTY=")
        })
        .take(100)
        .any(|e| e);
        if ended {
            return None;
        }
    }

    // q: in-flight slices are finished, then the summary.
    tmux.cmd(&["send-keys", "-t", "t", "q"]);
    let after = tmux.wait_for("the end of the run", Duration::from_secs(60), |t| {
        t.contains("STTY=")
    });
    Some(Seen {
        frame,
        after,
        alternate_during,
        alternate_after: alternate(),
    })
}

#[test]
fn dashboard_in_tmux_quits_cleanly_with_q() {
    if !have_tmux() {
        eprintln!("SKIPPED: tmux is not installed (apt-get install tmux)");
        return;
    }
    let dir = tempdir("tmux");
    let out = dir.join("out");
    let socket = format!("dicomflow-test-{}", std::process::id());
    let seen = match bundled_sample().and_then(|s| drive(&s, &out, &socket)) {
        Some(seen) => seen,
        None => {
            eprintln!("assets/sample missing or over too soon to watch; using a larger series");
            drive(&generated_sample(&dir), &out, &socket)
                .expect("the run ended before the dashboard showed numbers")
        }
    };
    let Seen {
        frame,
        after,
        alternate_during,
        alternate_after,
    } = seen;
    eprintln!("captured frame:\n{frame}");
    assert_eq!(
        alternate_during, "1",
        "the dashboard is on the alternate screen"
    );
    assert!(
        frame.contains("bottleneck") && frame.contains("Errors (0)"),
        "{frame}"
    );

    // Quitting before the end is not a success (130), unless every file was already done.
    let expected = if after.contains("stopped before every input was done") {
        "EXIT_CODE=130"
    } else {
        "EXIT_CODE=0"
    };
    assert!(after.contains(expected), "{expected}:\n{after}");
    assert!(
        after.contains("STTY=icanon"),
        "terminal left in raw mode:\n{after}"
    );
    assert!(
        after.contains("dicomflow:") && after.contains("frames:"),
        "{after}"
    );
    assert!(
        after.contains("stage") && after.contains("p95 ms"),
        "{after}"
    );
    assert_eq!(alternate_after, "0", "still on the alternate screen");
    // Nothing partial: no temporary files, every output a whole PNG.
    let mut outputs = 0;
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name == ".dicomflow" {
            // The run's state folder: the dashboard's log, not an output.
            assert!(
                p.join("dicomflow.log").is_file(),
                "no log in {}",
                p.display()
            );
            continue;
        }
        assert!(name.ends_with(".png"), "unexpected file {name}");
        let bytes = std::fs::read(&p).unwrap();
        assert!(
            bytes.ends_with(&[0xAE, 0x42, 0x60, 0x82]),
            "{name} is truncated"
        );
        outputs += 1;
    }
    assert!(outputs > 0);
    let _ = std::fs::remove_dir_all(&dir);
}
