//! Sharding on a real Slurm cluster: a single-node cluster (munged, slurmctld, slurmd as root,
//! no systemd, on loopback) started in this test's own folder, running the recipes of
//! examples/slurm/ unchanged:
//!
//! * a 4-task array renders a 200-file series with `--shard slurm`, and the merge job that
//!   follows it (`afterany`) exits 0: the outputs are byte-identical to one run's on one host
//!   and the merged totals equal that run's report's;
//! * the same job with task 2 killed at its first output write: the merge names shard 2 as
//!   missing and exits 1; resubmitting index 2 (`SHARDS=4 sbatch --array=2`, `--skip-existing`)
//!   completes the set.
//!
//! Every daemon the test starts is stopped by its PID when the test ends, pass or fail. It
//! skips (saying why) when not root or when `slurm-wlm` / `munge` are not installed, unless
//! `DICOMFLOW_REQUIRE_SLURM=1` (set by .ci/run, which installs them) makes that a failure.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    assert_exit, bin, output_files, read_json, repo_path, stderr, stdout, tempdir,
};

const DAEMONS: [&str; 3] = [
    "/usr/sbin/munged",
    "/usr/sbin/slurmctld",
    "/usr/sbin/slurmd",
];
const CLIENTS: [&str; 4] = ["sbatch", "sinfo", "squeue", "scancel"];

/// Why the cluster cannot be started here, if it cannot.
fn missing_prerequisite() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (slurmd and munged run as root here)".into());
    }
    for d in DAEMONS {
        if !Path::new(d).exists() {
            return Some(format!("{d} not found (apt-get install slurm-wlm munge)"));
        }
    }
    for c in CLIENTS {
        let found = Command::new("which")
            .arg(c)
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{c} not found (apt-get install slurm-wlm)"));
        }
    }
    None
}

/// Two ports nobody listens on now (both bound at once, so they differ), for slurmctld and
/// slurmd: not the default ones, which a host's own Slurm may use.
fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").unwrap();
    let b = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = |l: &TcpListener| l.local_addr().unwrap().port();
    (port(&a), port(&b))
}

/// A single-node cluster living in `dir`; dropping it stops what it started.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    /// munged, slurmctld, slurmd: started in the foreground, so their PIDs are these.
    daemons: Vec<(&'static str, Child)>,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let state = dir.join("state");
        for d in ["ctld", "spool", "logs"] {
            std::fs::create_dir_all(state.join(d)).unwrap();
        }
        let mut cluster = Cluster {
            dir: dir.to_path_buf(),
            conf: dir.join("slurm.conf"),
            daemons: Vec::new(),
        };
        // MUNGE with its own key and socket, so nothing of the host's is used or disturbed.
        let key = dir.join("munge.key");
        let mut random = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
            .unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key)
            .and_then(|mut f| f.write_all(&random))
            .unwrap();
        let socket = dir.join("munge.socket");
        let p = |name: &str| dir.join(name).to_str().unwrap().to_string();
        cluster.spawn(
            "munged",
            Command::new(DAEMONS[0]).args([
                "--foreground",
                &format!("--key-file={}", p("munge.key")),
                &format!("--socket={}", socket.display()),
                &format!("--pid-file={}", p("munged.pid")),
                &format!("--log-file={}", p("munged.log")),
                &format!("--seed-file={}", p("munged.seed")),
            ]),
        );
        wait_for(Duration::from_secs(10), "the MUNGE socket", || {
            socket.exists()
        });

        // The node as slurmd sees it ("NodeName=host CPUs=2 ... RealMemory=...").
        let probe = Command::new(DAEMONS[2]).arg("-C").output().unwrap();
        let node = stdout(&probe)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        let name = node
            .strip_prefix("NodeName=")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("slurmd -C: {node:?}"))
            .to_string();
        // Two GPUs that are not there (slurm hands out /dev/null and /dev/zero), so the
        // recipe's --gres=gpu:1 schedules as on a GPU partition.
        std::fs::write(
            dir.join("gres.conf"),
            format!("NodeName={name} Name=gpu File=/dev/null\nNodeName={name} Name=gpu File=/dev/zero\n"),
        )
        .unwrap();
        let s = |sub: &str| state.join(sub).to_str().unwrap().to_string();
        let ports = free_ports();
        let conf = format!(
            "ClusterName=dicomflowtest\n\
             SlurmctldHost={name}(127.0.0.1)\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={socket}\n\
             CredType=cred/munge\n\
             MpiDefault=none\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SwitchType=switch/none\n\
             ReturnToService=2\n\
             SlurmctldPidFile={ctld_pid}\n\
             SlurmdPidFile={slurmd_pid}\n\
             SlurmdSpoolDir={spool}\n\
             StateSaveLocation={save}\n\
             SchedulerType=sched/backfill\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SchedulerParameters=batch_sched_delay=0\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\n\
             SlurmctldLogFile={ctld_log}\n\
             SlurmdLogFile={slurmd_log}\n\
             GresTypes=gpu\n\
             {node} Gres=gpu:2 NodeAddr=127.0.0.1 State=UNKNOWN\n\
             PartitionName=debug Nodes={name} Default=YES MaxTime=INFINITE State=UP\n",
            ctld = ports.0,
            slurmd = ports.1,
            socket = socket.display(),
            ctld_pid = s("slurmctld.pid"),
            slurmd_pid = s("slurmd.pid"),
            spool = s("spool"),
            save = s("ctld"),
            ctld_log = s("logs/slurmctld.log"),
            slurmd_log = s("logs/slurmd.log"),
        );
        std::fs::write(&cluster.conf, conf).unwrap();
        let conf_path = cluster.conf.clone();
        cluster.spawn(
            "slurmctld",
            Command::new(DAEMONS[1])
                .arg("-D")
                .env("SLURM_CONF", &conf_path),
        );
        cluster.spawn(
            "slurmd",
            Command::new(DAEMONS[2])
                .arg("-D")
                .env("SLURM_CONF", &conf_path),
        );
        {
            let sinfo = || {
                cluster
                    .client("sinfo")
                    .args(["-h", "-o", "%T"])
                    .output()
                    .map(|o| stdout(&o).trim().to_string())
                    .unwrap_or_default()
            };
            wait_for(Duration::from_secs(60), "the node to be idle", || {
                sinfo() == "idle"
            });
        }
        cluster
    }

    fn spawn(&mut self, name: &'static str, cmd: &mut Command) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.out"))).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.daemons.push((name, child));
    }

    /// A Slurm client command talking to this cluster.
    fn client(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// The end of each daemon's log, for a failure message.
    fn logs(&self) -> String {
        let mut s = String::new();
        for f in [
            "state/logs/slurmctld.log",
            "state/logs/slurmd.log",
            "munged.log",
        ] {
            let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            s.push_str(&format!("--- {f}\n"));
            for l in tail.into_iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        // Jobs first (this cluster's only: SLURM_CONF), then the daemons, newest first.
        let _ = self
            .client("scancel")
            .args(["--quiet", "--user=root"])
            .status();
        for (name, child) in self.daemons.iter_mut().rev() {
            // SAFETY: kill with a PID this test spawned and has not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        eprintln!("{name} did not stop on SIGTERM: SIGKILL");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }
}

fn wait_for(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `cmd` to completion within `limit` (a job that never ends must not hang the suite).
fn run_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{cmd:?} did not finish in {limit:?}: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

fn recipe(name: &str) -> PathBuf {
    repo_path("examples/slurm").join(name)
}

#[test]
fn a_slurm_array_renders_shards_that_merge_into_the_single_host_run() {
    if let Some(why) = missing_prerequisite() {
        assert!(
            std::env::var_os("DICOMFLOW_REQUIRE_SLURM").is_none(),
            "DICOMFLOW_REQUIRE_SLURM is set, but {why}"
        );
        eprintln!("skipped: the Slurm test needs a local single-node cluster: {why}");
        return;
    }
    let dir = tempdir("slurm");
    let input = dir.join("series");
    let o = Command::new(bin())
        .args(["-q", "synth", "--size", "128", "--slices", "200"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(o.status.success());
    let single = dir.join("single");
    let o = Command::new(bin())
        .args(["run", "--no-tui", "-q"])
        .arg(&input)
        .arg("-o")
        .arg(&single)
        .arg("--report")
        .arg(dir.join("single.json"))
        .output()
        .unwrap();
    assert_exit(&o, 0);
    let expected = output_files(&single);
    assert_eq!(expected.len(), 200);
    let single_totals = read_json(&dir.join("single.json"))["result"]["totals"].clone();

    let cluster = Cluster::start(&dir);
    let logs = dir.join("job-logs");
    std::fs::create_dir_all(&logs).unwrap();
    // The recipe as a user runs it; the test's node has 2 CPUs, not the recipe's 16.
    let submit = |out: &Path, dicomflow: &Path| {
        let mut c = cluster.client("bash");
        c.arg(recipe("submit.sh"))
            .arg("4")
            .arg(out)
            .arg(&input)
            .env("WAIT", "1")
            .env("DICOMFLOW", dicomflow)
            .env(
                "SBATCH_OPTS",
                format!("--cpus-per-task=1 --chdir={}", logs.display()),
            );
        run_within(&mut c, Duration::from_secs(300))
    };
    let text = |o: &Output| format!("{}{}", stdout(o), stderr(o));
    let merge_log = |o: &Output| {
        // "merge: job 12 (...)": its output file holds what the merge said.
        let out = text(o);
        let id = out
            .lines()
            .find_map(|l| l.strip_prefix("merge: job "))
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no merge job id in {out}"))
            .to_string();
        std::fs::read_to_string(logs.join(format!("dicomflow-merge-{id}.out"))).unwrap_or_default()
    };

    // 1. Four tasks render the series; the merge job after them says it is complete.
    let out = dir.join("out");
    let o = submit(&out, Path::new(bin()));
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o), merge_log(&o));
    assert!(
        output_files(&out) == expected,
        "outputs differ from the single-host run"
    );
    let merged = read_json(&out.join(".dicomflow/merged.json"));
    assert_eq!(merged["complete"], true);
    assert_eq!(merged["shards"]["present"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(merged["result"]["totals"], single_totals);
    assert_eq!(merged["shards"]["by"], "path");
    let per_task: Vec<u64> = merged["shards"]["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["totals"]["files"].as_u64().unwrap())
        .collect();
    assert!(per_task.iter().all(|&n| n > 20), "{per_task:?}");

    // 2. The same job with task 2 killed by the kernel at its first output write (the
    // file-size limit's SIGXFSZ): a task that dies half-way, deterministically.
    let wrapper = dir.join("dicomflow-dies-in-task-2");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/bash\nif [ \"$SLURM_ARRAY_TASK_ID\" = 2 ]; then ulimit -f 1; fi\nexec {} \"$@\"\n",
            bin()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.join("out-killed");
    let o = submit(&out, &wrapper);
    let said = merge_log(&o);
    assert_eq!(o.status.code(), Some(1), "{}\n{said}", text(&o));
    assert!(said.contains("missing: shard 2:"), "{said}");
    let merged = read_json(&out.join(".dicomflow/merged.json"));
    assert_eq!(merged["complete"], false);
    assert_eq!(merged["shards"]["missing"][0]["index"], 2);
    assert_eq!(merged["shards"]["missing"].as_array().unwrap().len(), 1);
    assert!(output_files(&out).len() < 200);

    // 3. Resubmitting index 2 of the 4-shard job completes the set.
    let mut c = cluster.client("sbatch");
    c.args(["--wait", "--array=2", "--cpus-per-task=1"])
        .arg(format!("--chdir={}", logs.display()))
        .arg(recipe("render.sbatch"))
        .env("INPUT", &input)
        .env("OUT", &out)
        .env("SHARDS", "4")
        .env("DICOMFLOW", bin());
    let o = run_within(&mut c, Duration::from_secs(300));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = Command::new(bin())
        .args(["report", "merge"])
        .arg(out.join(".dicomflow/reports"))
        .args(["--shards", "4", "-o"])
        .arg(out.join(".dicomflow/merged.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        output_files(&out) == expected,
        "the resumed job's outputs differ"
    );
    let merged = read_json(&out.join(".dicomflow/merged.json"));
    assert_eq!(merged["complete"], true);
    assert_eq!(merged["result"]["totals"], single_totals);
    drop(cluster);
    std::fs::remove_dir_all(&dir).unwrap();
}
