//! Sharded runs from the real binary, on one host: the shards of a job (by path or series,
//! walked or from a manifest, each with other thread counts) render exactly what one run
//! renders, byte for byte; their reports validate and merge to the single run's totals; a
//! missing shard is named until it is run again; a manifest balances mixed slice sizes by
//! bytes; bad requests exit 2 with a reason. (tests/it/slurm.rs runs the same on a real Slurm
//! cluster.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{
    self, assert_exit, bin, code, dicomflow, output_files, read_json, repo_path, s, schema, stderr,
    stdout, tempdir,
};

/// Two series of small slices in two folders, a multi-frame file of 5 frames, a truncated
/// slice (fails) and a text file (skipped): 45 files, 47 outputs.
fn inputs(dir: &Path) -> PathBuf {
    let input = dir.join("in");
    for (folder, slices, seed) in [("ct/a", "30", "1"), ("ct/b", "12", "2")] {
        let o = dicomflow(&[
            "-q",
            "synth",
            "--size",
            "48",
            "--slices",
            slices,
            "--seed",
            seed,
            s(&input.join(folder)),
        ]);
        assert_exit(&o, 0);
    }
    // A multi-frame file: its frames stay together in one shard.
    let o = dicomflow(&[
        "-q",
        "synth",
        "--multiframe",
        "--size",
        "48",
        "--slices",
        "5",
        "--seed",
        "3",
        s(&input.join("mf")),
    ]);
    assert_exit(&o, 0);
    let good = std::fs::read(input.join("ct/a/IM00001.dcm")).unwrap();
    std::fs::write(input.join("ct/cut.dcm"), &good[..good.len() - 900]).unwrap();
    std::fs::write(input.join("notes.txt"), "not DICOM").unwrap();
    input
}

fn assert_valid(schema_file: &str, doc: &Value, what: &str) {
    let errors = schema::errors_of(&schema::load(schema_file), doc);
    assert!(errors.is_empty(), "{what}:\n{}", errors.join("\n"));
}

#[test]
fn shards_render_what_one_run_renders_and_merge_to_its_totals() {
    let dir = tempdir("shard-union");
    let input = inputs(&dir);
    let single = dir.join("single");
    let o = dicomflow(&[
        "run",
        "--no-tui",
        s(&input),
        "-o",
        s(&single),
        "--report",
        s(&dir.join("single.json")),
    ]);
    assert_eq!(code(&o), 1, "the truncated file fails: {}", stderr(&o));
    let single_report = read_json(&dir.join("single.json"));
    assert!(single_report["shard"].is_null());
    let expected = output_files(&single);
    assert_eq!(expected.len(), 47);

    let manifest = dir.join("job.tsv");
    let o = dicomflow(&["scan", s(&input), "-o", s(&manifest), "--with-series"]);
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("listed 45 file(s)"), "{}", stderr(&o));

    let n = 3;
    for (mode, extra) in [
        ("path", vec![s(&input)]),
        ("series", vec![s(&input), "--shard-by", "series"]),
        ("manifest-path", vec!["--manifest", s(&manifest)]),
        (
            "manifest-series",
            vec!["--manifest", s(&manifest), "--shard-by", "series"],
        ),
    ] {
        let out = dir.join(format!("out-{mode}"));
        for i in 0..n {
            // Each shard with other threads and layout: the plan may not depend on them.
            let spec = format!("{i}/{n}");
            let writers = (i + 1).to_string();
            let layout = if i == 1 { "stages" } else { "shared" };
            let mut args = vec!["run", "--no-tui", "-q", "-o", s(&out), "--shard", &spec];
            args.extend(["--writers", &writers, "--layout", layout]);
            args.extend(extra.iter().copied());
            let o = dicomflow(&args);
            assert!([0, 1].contains(&code(&o)), "{mode} {spec}: {}", stderr(&o));
        }
        assert!(
            output_files(&out) == expected,
            "{mode}: outputs differ from one run's"
        );

        let reports = out.join(".dicomflow/reports");
        let mut files_per_shard = Vec::new();
        let mut shards_of_series: BTreeMap<String, std::collections::BTreeSet<u32>> =
            BTreeMap::new();
        let mut multiframe_in = 0;
        for i in 0..n {
            let r = read_json(&reports.join(format!("shard-{i}-of-{n}.json")));
            assert_valid("docs/report-schema.json", &r, &format!("{mode} shard {i}"));
            assert_eq!(r["shard"]["index"], i);
            assert_eq!(
                r["shard"]["by"],
                if mode.ends_with("series") {
                    "series"
                } else {
                    "path"
                }
            );
            assert_eq!(
                r["shard"]["balance"],
                if mode.starts_with("manifest") {
                    "bytes"
                } else {
                    "hash"
                }
            );
            let encode = r["statistics"]["stages"]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["name"] == "encode"))
                .expect("an encode stage");
            assert_eq!(
                encode["histogram"]["encoding"],
                "hdrhistogram-v2-deflate-base64"
            );
            files_per_shard.push(r["result"]["totals"]["files"].as_u64().unwrap());
            for f in r["result"]["files"].as_array().unwrap() {
                if let Some(uid) = f["meta"]["series_uid"].as_str() {
                    shards_of_series
                        .entry(uid.to_owned())
                        .or_default()
                        .insert(i);
                }
                if f["path"].as_str().unwrap().ends_with("MF00001.dcm") {
                    assert_eq!(f["outputs"].as_array().unwrap().len(), 5, "{mode}");
                    multiframe_in += 1;
                }
            }
        }
        assert_eq!(
            files_per_shard.iter().sum::<u64>(),
            45,
            "{mode}: {files_per_shard:?}"
        );
        assert_eq!(
            multiframe_in, 1,
            "{mode}: the multi-frame file is in one shard"
        );
        assert_eq!(shards_of_series.len(), 3, "{mode}");
        if mode.ends_with("series") {
            // Each series (30 slices, 12 slices, the multi-frame file) in one shard.
            for (uid, shards) in &shards_of_series {
                assert_eq!(shards.len(), 1, "{mode}: series {uid} in shards {shards:?}");
            }
        }

        let merged = dir.join(format!("merged-{mode}.json"));
        let o = dicomflow(&["report", "merge", s(&reports), "-o", s(&merged)]);
        assert_eq!(code(&o), 1, "{mode}: a file failed: {}", stderr(&o));
        assert!(stderr(&o).contains("cut.dcm"), "{}", stderr(&o));
        let m = read_json(&merged);
        assert_valid("docs/merged-report-schema.json", &m, mode);
        assert_eq!(m["complete"], true);
        assert_eq!(
            m["result"]["totals"], single_report["result"]["totals"],
            "{mode}: merged totals"
        );
        let encode = m["statistics"]["stages"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "encode"))
            .expect("an encode stage");
        assert_eq!(encode["count"], 47);
        assert_eq!(m["result"]["failed_files"].as_array().unwrap().len(), 1);
    }

    // A shard whose task died leaves no report: the merge names it and exits 1; running that
    // index again with --skip-existing completes the set.
    let out = dir.join("out-path");
    let reports = out.join(".dicomflow/reports");
    let victim = (0..n)
        .find(|i| {
            let r = read_json(&reports.join(format!("shard-{i}-of-{n}.json")));
            r["result"]["totals"]["frames_written"].as_u64() > Some(0)
        })
        .unwrap();
    std::fs::remove_file(reports.join(format!("shard-{victim}-of-{n}.json"))).unwrap();
    let o = dicomflow(&["-q", "report", "merge", s(&reports)]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains(&format!("missing: shard {victim}:")),
        "{}",
        stderr(&o)
    );
    let spec = format!("{victim}/{n}");
    let o = dicomflow(&[
        "run",
        "--no-tui",
        "-q",
        s(&input),
        "-o",
        s(&out),
        "--shard",
        &spec,
        "--skip-existing",
    ]);
    assert!([0, 1].contains(&code(&o)), "{}", stderr(&o));
    let r = read_json(&reports.join(format!("shard-{victim}-of-{n}.json")));
    assert_eq!(r["result"]["totals"]["frames_written"], 0, "all were there");
    let o = dicomflow(&["report", "merge", s(&reports), "--shards", "3"]);
    assert!(stderr(&o).contains("merged 3 of 3"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("missing"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_manifest_balances_mixed_slice_sizes_by_bytes() {
    // 12 slices of 2000² and 100 of 512² (8 MB and 0.5 MB each) over 8 shards: by count a
    // shard could get three large slices; by bytes each gets within 10 % of the mean.
    let dir = tempdir("shard-bytes");
    let input = dir.join("in");
    for (folder, size, slices) in [("large", "2000", "12"), ("small", "512", "100")] {
        let o = dicomflow(&[
            "-q",
            "synth",
            "--size",
            size,
            "--slices",
            slices,
            s(&input.join(folder)),
        ]);
        assert_exit(&o, 0);
    }
    let manifest = dir.join("job.tsv");
    let o = dicomflow(&["scan", s(&input), "-o", s(&manifest), "--plan", "8"]);
    assert_exit(&o, 0);
    let table = stdout(&o);
    let planned: Vec<u64> = table
        .lines()
        .skip(1)
        .take(8)
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    assert_eq!(planned.len(), 8, "{table}");

    // The shards the runs actually render: the bytes of the files each one's report lists.
    let out = dir.join("out");
    let mut rendered = Vec::new();
    for i in 0..8 {
        let spec = format!("{i}/8");
        let o = dicomflow(&[
            "run",
            "--no-tui",
            "-q",
            "--manifest",
            s(&manifest),
            "-o",
            s(&out),
            "--shard",
            &spec,
        ]);
        assert_exit(&o, 0);
        let r = read_json(&out.join(format!(".dicomflow/reports/shard-{i}-of-8.json")));
        let bytes: u64 = r["result"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                std::fs::metadata(f["path"].as_str().unwrap())
                    .unwrap()
                    .len()
            })
            .sum();
        assert_eq!(r["shard"]["planned_bytes"], bytes, "shard {i}");
        rendered.push(bytes);
    }
    assert_eq!(rendered, planned);
    let mean = rendered.iter().sum::<u64>() as f64 / 8.0;
    let max = *rendered.iter().max().unwrap() as f64;
    println!(
        "bytes per shard {rendered:?}; largest {:+.1} % of the mean",
        (max / mean - 1.0) * 100.0
    );
    assert!(
        max <= 1.10 * mean,
        "{rendered:?}: the largest is {:.3} × the mean",
        max / mean
    );
    assert_eq!(output_files(&out).len(), 112);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_shard_requests_exit_2_with_a_reason() {
    let dir = tempdir("shard-bad");
    let input = inputs(&dir);
    let plain = dir.join("plain.tsv");
    assert_eq!(
        code(&dicomflow(&["-q", "scan", s(&input), "-o", s(&plain)])),
        0
    );
    let out = dir.join("out");
    let (none, notes) = (dir.join("none.tsv"), input.join("notes.txt"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![s(&input), "--shard", "3/3"],
            "shard 3 of 3 does not exist",
        ),
        (vec![s(&input), "--shard", "two/3"], "expected I/N"),
        (
            vec![s(&input), "--shard", "slurm"],
            "SLURM_ARRAY_TASK_ID is not set",
        ),
        (
            vec![s(&input), "--shard", "k8s"],
            "JOB_COMPLETION_INDEX is not set",
        ),
        (
            vec![s(&input), "--shard", "0/2", "--shard-by", "study"],
            "expected path or series",
        ),
        (
            vec![
                "--manifest",
                s(&plain),
                "--shard",
                "0/2",
                "--shard-by",
                "series",
            ],
            "--with-series",
        ),
        (vec!["--manifest", s(&none)], "none.tsv"),
        (vec!["--manifest", s(&notes)], "not a dicomflow manifest"),
    ];
    for (args, want) in cases {
        let mut full = vec!["run", "--no-tui", "-o", s(&out)];
        full.extend(args.iter().copied());
        let o = Command::new(bin())
            .args(&full)
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("JOB_COMPLETION_INDEX")
            .env_remove("DICOMFLOW_SHARD_COUNT")
            .output()
            .unwrap();
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
    // Merging: nothing there is a usage error; another job's report mixed in too.
    let o = dicomflow(&["report", "merge", s(&dir)]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("no shard reports"), "{}", stderr(&o));
    let o = dicomflow(&["report", "merge", s(&dir), "--shards", "2"]);
    assert_eq!(code(&o), 1, "all missing: {}", stderr(&o));
    assert!(stderr(&o).contains("missing: shard 1"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The `command:` list of a Kubernetes manifest's container, comments and quotes removed.
fn yaml_command(text: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != "command:").skip(1);
    let mut out = Vec::new();
    for l in lines.by_ref() {
        let Some(item) = l.trim().strip_prefix("- ") else {
            break;
        };
        let item = item.split(" #").next().unwrap_or("").trim();
        out.push(item.trim_matches('"').to_string());
    }
    out
}

/// The number after `key:` in a manifest (`completions: 8  # comment`, `value: "8"`).
fn yaml_number(text: &str, key: &str) -> u32 {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .and_then(|r| r.split('#').next())
        .map(|r| r.trim().trim_matches('"').parse().unwrap())
        .unwrap_or_else(|| panic!("no {key} in the manifest"))
}

#[test]
fn the_kubernetes_recipe_renders_and_merges_here() {
    // No cluster here: the pods' commands run as processes, each with the JOB_COMPLETION_INDEX
    // an Indexed Job gives it and the manifest's environment, /data being a scratch folder.
    let recipes = repo_path("examples/kubernetes");
    let render = std::fs::read_to_string(recipes.join("render-job.yaml")).unwrap();
    let merge = std::fs::read_to_string(recipes.join("merge-job.yaml")).unwrap();
    assert!(render.contains("completionMode: Indexed"));
    assert!(render.contains("nvidia.com/gpu: 1"));
    let n = yaml_number(&render, "completions:");
    let env_lines: Vec<&str> = render.lines().map(str::trim).collect();
    let count_at = env_lines
        .iter()
        .position(|l| *l == "- name: DICOMFLOW_SHARD_COUNT")
        .expect("DICOMFLOW_SHARD_COUNT in the pod's environment");
    let count = yaml_number(env_lines[count_at + 1], "value:");
    assert_eq!(count, n, "DICOMFLOW_SHARD_COUNT must equal completions");
    let merge_cmd = yaml_command(&merge);
    let shards_at = merge_cmd.iter().position(|a| a == "--shards").unwrap();
    assert_eq!(
        merge_cmd[shards_at + 1],
        n.to_string(),
        "the merge's --shards"
    );

    let dir = tempdir("shard-k8s");
    let data = dir.join("data");
    let o = dicomflow(&[
        "-q",
        "synth",
        "--size",
        "32",
        "--slices",
        "40",
        s(&data.join("in/ct")),
    ]);
    assert_exit(&o, 0);
    let at_data = |cmd: &[String]| -> Vec<String> {
        cmd.iter()
            .skip(1) // the image's `dicomflow`: the binary under test here
            .map(|a| a.replace("/data", s(&data)))
            .collect()
    };
    let render_cmd = at_data(&yaml_command(&render));
    assert_eq!(render_cmd[0], "run");
    for i in 0..n {
        let o = Command::new(bin())
            .args(&render_cmd)
            .env("JOB_COMPLETION_INDEX", i.to_string())
            .env("DICOMFLOW_SHARD_COUNT", count.to_string())
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "pod {i}: {}", stderr(&o));
    }
    let single = dir.join("single");
    let o = dicomflow(&[
        "run",
        "--no-tui",
        "-q",
        s(&data.join("in")),
        "-o",
        s(&single),
    ]);
    assert_exit(&o, 0);
    assert!(output_files(&data.join("out")) == output_files(&single));
    let o = Command::new(bin())
        .args(at_data(&merge_cmd))
        .output()
        .unwrap();
    assert_exit(&o, 0);
    let merged = read_json(&data.join("out/.dicomflow/merged.json"));
    assert_eq!(merged["complete"], true);
    assert_eq!(merged["result"]["totals"]["frames_written"], 40);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_manifest_of_several_folders_names_outputs_as_a_run_of_them_does() {
    let dir = tempdir("shard-several");
    let (a, b) = (dir.join("in/a"), dir.join("in/b"));
    // Two series whose files have the same names, and a file given directly.
    for (folder, seed) in [(&a, "3"), (&b, "4")] {
        let o = dicomflow(&[
            "synth",
            s(folder),
            "-q",
            "--size",
            "32",
            "--slices",
            "2",
            "--seed",
            seed,
        ]);
        assert_exit(&o, 0);
    }
    let single = dir.join("in/b/IM00002.dcm");
    let manifest = dir.join("m.tsv");
    let o = dicomflow(&["scan", s(&a), s(&b), s(&single), "-o", s(&manifest)]);
    assert_exit(&o, 0);
    let (walked, listed) = (dir.join("walked"), dir.join("listed"));
    let o = dicomflow(&[
        "run",
        s(&a),
        s(&b),
        s(&single),
        "-o",
        s(&walked),
        "-q",
        "--no-tui",
    ]);
    assert_exit(&o, 0);
    let o = dicomflow(&[
        "run",
        "--manifest",
        s(&manifest),
        "-o",
        s(&listed),
        "-q",
        "--no-tui",
    ]);
    assert_exit(&o, 0);
    let names = common::file_names(&listed);
    assert_eq!(names, common::file_names(&walked));
    assert_eq!(
        names,
        [
            "a/IM00001.png",
            "a/IM00002.png",
            "b/IM00001.png",
            "b/IM00002.png"
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
