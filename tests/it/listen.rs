//! `dicomflow listen` against real peers (issue 19, acceptance 1–4): DCMTK's `storescu` and
//! `echoscu` proposing several syntaxes over concurrent associations, Orthanc forwarding what
//! it stores, a `kill -9` while a sender streams, and hostile peers. Outputs are compared byte
//! for byte with `dicomflow run` on the same files. Without DCMTK or Orthanc installed (CI
//! installs both, see `.ci/run`) the tests say why they skip.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::peers::*;
use crate::common::{pngs, tempdir};
use dicom_ul::pdu::{PDataValue, PDataValueType};
use dicomflow::source::listen::dimse::{encode_request, status, C_STORE_RQ};
use dicomflow::source::listen::scu::{Outgoing, Scu, ScuOptions};

const STORESCU: &str = "/usr/bin/storescu";
const ECHOSCU: &str = "/usr/bin/echoscu";

/// `storescu -xf` configuration proposing each syntax in its own presentation context.
const MIXED_CFG: &str = r"[[TransferSyntaxes]]
[ELE]
TransferSyntax1 = LittleEndianExplicit
[JLL]
TransferSyntax1 = JPEGLossless:Non-hierarchical-1stOrderPrediction
[RLE]
TransferSyntax1 = RLELossless
[JLS]
TransferSyntax1 = JPEGLSLossless
[DFL]
TransferSyntax1 = DeflatedLittleEndianExplicit
[[PresentationContexts]]
[Mixed]
PresentationContext1 = CTImageStorage\ELE
PresentationContext2 = CTImageStorage\JLL
PresentationContext3 = CTImageStorage\RLE
PresentationContext4 = CTImageStorage\JLS
PresentationContext5 = CTImageStorage\DFL
[[Profiles]]
[Mixed]
PresentationContexts = Mixed
";

/// 200 slices in five syntaxes (40 each, distinct instances) made by DCMTK's own encoders.
fn mixed_series(dir: &Path) -> Vec<PathBuf> {
    let src = synth(&dir.join("src"), 64, 200, 19);
    let tools: [(&str, &[&str]); 5] = [
        ("ele", &["dcmconv", "+te"]),
        ("jll", &["dcmcjpeg", "+e1"]),
        ("rle", &["dcmcrle"]),
        ("jls", &["dcmcjpls"]),
        ("dfl", &["dcmconv", "+td"]),
    ];
    let mut out = Vec::new();
    for (i, file) in src.iter().enumerate() {
        let (name, tool) = tools[i / 40];
        let target = dir.join("send").join(name).join(file.file_name().unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        let st = Command::new(tool[0])
            .args(&tool[1..])
            .arg(file)
            .arg(&target)
            .status()
            .unwrap();
        assert!(st.success(), "{tool:?} {}", file.display());
        out.push(target);
    }
    out
}

/// The listener's spool entries left (rendered instances leave the spool).
fn spool_entries(out: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(out.join(".spool"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "dcm"))
        .collect()
}

/// Every sent instance has its output, byte-identical to `run` on the same file.
fn assert_outputs_match(
    out: &Path,
    files: &[PathBuf],
    refs: &std::collections::BTreeMap<String, Vec<u8>>,
) {
    for f in files {
        let uid = sop_instance_uid(f);
        let got = std::fs::read(out.join(format!("{uid}.png")))
            .unwrap_or_else(|e| panic!("no output for {} ({uid}): {e}", f.display()));
        assert!(
            got == refs[&uid],
            "{}: output differs from `dicomflow run`",
            f.display()
        );
    }
}

#[test]
fn dcmtk_storescu_mixed_syntaxes_over_four_associations_echo_and_wrong_called_ae() {
    let tools = [
        STORESCU, ECHOSCU, "dcmconv", "dcmcjpeg", "dcmcrle", "dcmcjpls",
    ];
    if let Some(why) = missing(&tools) {
        eprintln!("skipped: {why} (apt-get install dcmtk)");
        return;
    }
    let dir = tempdir("listen-dcmtk");
    let files = mixed_series(&dir);
    let out = dir.join("out");
    let mut listen = start_listen(&dir, &out, &[]);
    let port = listen.port.to_string();

    let (st, log) = dcmtk(ECHOSCU, &["-aec", "DICOMFLOW", "127.0.0.1", &port]);
    assert!(st.success(), "echoscu: {log}");
    let (st, log) = dcmtk(ECHOSCU, &["-aec", "SOMEONE_ELSE", "127.0.0.1", &port]);
    assert!(!st.success(), "a wrong called AE title was accepted");
    assert!(log.contains("Called AE Title Not Recognized"), "{log}");

    let cfg = dir.join("mixed.cfg");
    std::fs::write(&cfg, MIXED_CFG).unwrap();
    // Four senders at once, each with every syntax.
    let senders: Vec<_> = (0..4)
        .map(|k| {
            let mine: Vec<String> = files
                .iter()
                .skip(k)
                .step_by(4)
                .map(|p| p.display().to_string())
                .collect();
            let (cfg, port) = (cfg.display().to_string(), port.clone());
            std::thread::spawn(move || {
                let mut args = vec![
                    "-v",
                    "-xf",
                    &cfg,
                    "Mixed",
                    "-aec",
                    "DICOMFLOW",
                    "127.0.0.1",
                    &port,
                ];
                args.extend(mine.iter().map(String::as_str));
                let (st, log) = dcmtk(STORESCU, &args);
                (st, log, mine.len())
            })
        })
        .collect();
    for s in senders {
        let (st, log, n) = s.join().unwrap();
        assert!(st.success(), "storescu failed:\n{log}");
        assert_eq!(
            acknowledged(&log).len(),
            n,
            "not every store was acknowledged:\n{log}"
        );
    }
    let status = listen.proc.terminate();
    let text = listen.proc.output();
    assert!(status.success(), "listen exited with {status}:\n{text}");
    assert!(
        text.contains("4 association(s)") || text.contains("association(s)"),
        "{text}"
    );
    assert!(!text.contains("panicked"), "{text}");
    assert!(
        text.contains("5 of 5 presentation context(s) accepted"),
        "{text}"
    );
    assert!(spool_entries(&out).is_empty(), "spool not emptied");
    assert_eq!(pngs(&out).len(), 200);
    let refs = reference_outputs(&files, &dir.join("ref"));
    assert_outputs_match(&out, &files, &refs);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Orthanc's configuration with a modality entry for dicomflow and a Lua auto-route.
fn orthanc_config(dir: &Path, dicom_port: u16, http_port: u16, listen_port: u16) -> PathBuf {
    let db = dir.join("db");
    std::fs::create_dir_all(&db).unwrap();
    let lua = dir.join("autoroute.lua");
    std::fs::write(
        &lua,
        "function OnStoredInstance(instanceId, tags, metadata, origin)\n  \
         if origin['RequestOrigin'] ~= 'Lua' then SendToModality(instanceId, 'dicomflow') end\n\
         end\n",
    )
    .unwrap();
    let cfg = serde_json::json!({
        "Name": "dicomflow-test",
        "StorageDirectory": db, "IndexDirectory": db, "Plugins": [],
        "HttpPort": http_port, "RemoteAccessAllowed": false, "AuthenticationEnabled": false,
        "DicomServerEnabled": true, "DicomAet": "ORTHANC", "DicomPort": dicom_port,
        "DicomCheckCalledAet": false, "DicomAlwaysAllowStore": true,
        "DicomModalities": {"dicomflow": ["DICOMFLOW", "127.0.0.1", listen_port]},
        "DicomScuTimeout": 10, "LuaScripts": [lua],
    });
    let path = dir.join("orthanc.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    path
}

#[test]
fn orthanc_autoroute_forwards_what_it_stores_and_everything_is_rendered() {
    if let Some(why) = missing(&["/usr/sbin/Orthanc", STORESCU, ECHOSCU]) {
        eprintln!("skipped: {why} (apt-get install orthanc dcmtk)");
        return;
    }
    let dir = tempdir("listen-orthanc");
    let files = synth(&dir.join("src"), 64, 20, 23);
    let out = dir.join("out");
    let mut listen = start_listen(&dir, &out, &[]);
    let (dicom_port, http_port) = (free_port(), free_port());
    let cfg = orthanc_config(&dir, dicom_port, http_port, listen.port);
    let logdir = dir.join("orthanc-logs");
    std::fs::create_dir_all(&logdir).unwrap();
    let mut cmd = Command::new("/usr/sbin/Orthanc");
    cmd.arg(format!("--logdir={}", logdir.display()))
        .arg(&cfg)
        .env("TCP_NODELAY", "1");
    let mut orthanc = Proc::spawn("Orthanc", cmd, &dir.join("orthanc.log"));
    let port = dicom_port.to_string();
    let up = wait_until(Duration::from_secs(30), || {
        dcmtk(ECHOSCU, &["-aec", "ORTHANC", "127.0.0.1", &port])
            .0
            .success()
    });
    assert!(up, "Orthanc did not start:\n{}", orthanc.output());
    let mut args = vec!["-aec", "ORTHANC", "127.0.0.1", &port];
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    let (st, log) = dcmtk(STORESCU, &args);
    assert!(st.success(), "storescu into Orthanc:\n{log}");
    let all = wait_until(Duration::from_secs(60), || pngs(&out).len() == files.len());
    assert!(
        all,
        "{} of {} forwarded instances rendered; listen:\n{}\nOrthanc:\n{}",
        pngs(&out).len(),
        files.len(),
        listen.proc.output(),
        orthanc.output()
    );
    orthanc.terminate();
    let status = listen.proc.terminate();
    assert!(status.success(), "{}", listen.proc.output());
    assert!(listen
        .proc
        .output()
        .contains("ORTHANC@127.0.0.1: 20 received"));
    let refs = reference_outputs(&files, &dir.join("ref"));
    assert_outputs_match(&out, &files, &refs);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kill_9_while_a_sender_streams_loses_nothing_acknowledged() {
    kill_9_mid_stream("listen-crash", false);
}

/// With `durable = false` an acknowledged instance survives a crash of dicomflow (not of the
/// machine): its spool entry ends as soon as its outputs are written, without a sync. (This
/// guards against loss; it cannot tell the finisher's batches from ending entries at once.)
#[test]
fn kill_9_loses_nothing_acknowledged_without_durable_acknowledgements() {
    kill_9_mid_stream("listen-crash-nd", true);
}

/// Kills `listen` once 40 instances are acknowledged while `storescu` streams the rest,
/// restarts it on the same output folder, and checks every acknowledged instance's output.
fn kill_9_mid_stream(name: &str, not_durable: bool) {
    if let Some(why) = missing(&[STORESCU]) {
        eprintln!("skipped: {why} (apt-get install dcmtk)");
        return;
    }
    let dir = tempdir(name);
    // Without syncs a listener acknowledges up to ~1000 small instances/s on the 2-core box
    // (~3000 on the H200): enough instances that the kill lands mid-stream all the same.
    let count = if not_durable { 1500 } else { 300 };
    let files = synth(&dir.join("src"), 128, count, 29);
    let out = dir.join("out");
    let cfg = dir.join("listen.toml");
    std::fs::write(&cfg, format!("[listen]\ndurable = {}\n", !not_durable)).unwrap();
    let cfg = cfg.display().to_string();
    let extra = ["-c", cfg.as_str()];
    let listen = start_listen(&dir, &out, &extra);
    let port = listen.port.to_string();
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let mut cmd = Command::new(STORESCU);
    cmd.args(["-v", "-aec", "DICOMFLOW", "127.0.0.1", &port])
        .args(&names)
        .env("TCP_NODELAY", "1");
    let mut sender = Proc::spawn("storescu", cmd, &dir.join("storescu.log"));
    // Kill once a fair part has been acknowledged, while the sender is still streaming.
    let streaming = wait_until(Duration::from_secs(60), || {
        acknowledged(&sender.output()).len() >= 40
    });
    assert!(
        streaming,
        "the sender did not get going:\n{}",
        sender.output()
    );
    listen.proc.signal(libc::SIGKILL);
    let mut listen = listen;
    listen.proc.wait_for(Duration::from_secs(10)).unwrap();
    sender.wait_for(Duration::from_secs(60)).unwrap();
    let acked = acknowledged(&sender.output());
    assert!(
        acked.len() >= 40 && acked.len() < files.len(),
        "{} acknowledged: the kill did not land mid-stream",
        acked.len()
    );

    // Restart on the same output folder: the spool is finished first.
    let mut again = start_listen(&dir, &out, &extra);
    let drained = wait_until(Duration::from_secs(60), || spool_entries(&out).is_empty());
    assert!(drained, "spool not drained:\n{}", again.proc.output());
    let status = again.proc.terminate();
    assert!(status.success(), "{}", again.proc.output());
    let refs = reference_outputs(&acked, &dir.join("ref"));
    assert_outputs_match(&out, &acked, &refs);
    // Nothing partial anywhere: every output decodes, no temporary file is left.
    for p in pngs(&out) {
        assert!(decodes_completely(&p), "{} is partial", p.display());
    }
    let stray: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp") || n.ends_with(".part"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A raw connection to the listener.
fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until the listener closes the connection (or 10 s pass); the bytes it sent.
fn until_closed(mut s: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

fn scu_options(port: u16) -> ScuOptions {
    ScuOptions {
        addr: format!("127.0.0.1:{port}"),
        ..Default::default()
    }
}

/// An association, once the listener has a free slot (the thread of a connection it has
/// just dropped may take a moment to end and give its slot back).
fn associate(port: u16, files: &[Outgoing]) -> Scu {
    let mut scu = None;
    let ok = wait_until(Duration::from_secs(10), || {
        scu = Scu::connect(&scu_options(port), files).ok();
        scu.is_some()
    });
    assert!(ok, "no association with the listener");
    scu.unwrap()
}

#[test]
fn hostile_peers_are_dropped_with_a_reason_and_the_listener_keeps_serving() {
    let dir = tempdir("listen-hostile");
    let files = synth(&dir.join("src"), 64, 4, 31);
    let outgoing: Vec<Outgoing> = files.iter().map(|f| Outgoing::open(f).unwrap()).collect();
    let config = dir.join("listen.toml");
    std::fs::write(
        &config,
        "[listen]\nmax_associations = 2\nstall_timeout_s = 2\nidle_timeout_s = 5\n",
    )
    .unwrap();
    let out = dir.join("out");
    // The CPU backend: on a GPU host `auto` would make a CUDA context in the background (about
    // 150 MiB) while the peers connect, which is no growth caused by them.
    let mut listen = start_listen(
        &dir,
        &out,
        &["-c", config.to_str().unwrap(), "--backend", "cpu"],
    );
    let port = listen.port;
    let rss_before = listen.proc.rss_kib();

    // Garbage instead of an association request: an HTTP request, and random bytes.
    let mut s = connect(port);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    until_closed(s);
    let mut s = connect(port);
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let _ = s.write_all(&noise);
    until_closed(s);

    // A PDU header declaring 4 GiB: refused from the header, nothing allocated.
    let mut s = connect(port);
    s.write_all(&[0x01, 0x00, 0xff, 0xff, 0xff, 0xf0]).unwrap();
    until_closed(s);

    // An association, then a PDU of an unknown type.
    let mut scu = associate(port, &outgoing);
    assert_eq!(scu.echo().unwrap(), status::SUCCESS);
    let mut raw = unknown_pdu_after_association(port, &outgoing);
    raw.write_all(&[0x09, 0x00, 0x00, 0x00, 0x00, 0x04, 1, 2, 3, 4])
        .unwrap();
    let _ = until_closed(raw);
    // After the association, PDUs are read by the listener's own reader: a P-DATA-TF header
    // declaring 4 GiB, and a PDV item whose length is below its own header, both aborted.
    for pdu in [
        &[0x04, 0x00, 0xff, 0xff, 0xff, 0xf2][..],
        &[0x04, 0x00, 0, 0, 0, 6, 0, 0, 0, 1, 1, 3],
    ] {
        let mut raw = unknown_pdu_after_association(port, &outgoing);
        raw.write_all(pdu).unwrap();
        let got = until_closed(raw);
        assert_eq!(got.first(), Some(&0x07), "expected an A-ABORT, got {got:?}");
    }

    // A data set with an element claiming 4 GiB: refused with "cannot understand".
    let huge = dir.join("huge.dcm");
    write_huge_length_file(&files[0], &huge);
    let (st, comment) = scu.store(&Outgoing::open(&huge).unwrap()).unwrap();
    assert_eq!(st, status::CANNOT_UNDERSTAND, "{comment:?}");
    assert!(comment.unwrap_or_default().contains("claims"));
    scu.release().unwrap();

    // Disconnecting in the middle of an instance, and stalling in the middle of one while
    // another sender is served.
    disconnect_mid_instance(port, &outgoing[1], false);
    let stalled = {
        let file = outgoing[1].clone();
        std::thread::spawn(move || disconnect_mid_instance(port, &file, true))
    };
    std::thread::sleep(Duration::from_millis(300));
    let mut other = associate(port, &outgoing);
    assert_eq!(other.store(&outgoing[2]).unwrap().0, status::SUCCESS);
    other.release().unwrap();
    stalled.join().unwrap();

    // More associations than allowed: the third is refused while two are open.
    let first = associate(port, &outgoing);
    let second = associate(port, &outgoing);
    let third = Scu::connect(&scu_options(port), &outgoing);
    assert!(third.is_err(), "a third association was accepted");
    first.release().unwrap();
    second.release().unwrap();

    // Still serving: every file stored and rendered.
    let ok = wait_until(Duration::from_secs(10), || {
        Scu::connect(&scu_options(port), &outgoing).is_ok_and(|mut scu| {
            let stored = outgoing
                .iter()
                .all(|o| scu.store(o).is_ok_and(|(s, _)| s == 0));
            let _ = scu.release();
            stored
        })
    });
    assert!(ok, "{}", listen.proc.output());
    assert!(wait_until(Duration::from_secs(20), || pngs(&out).len() == files.len()));
    let rss_after = listen.proc.rss_kib();
    let status = listen.proc.terminate();
    let text = listen.proc.output();
    assert!(status.success(), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    for why in [
        "Incoming pdu was too large",
        "too large: length 4294967282",
        "has length 1 (must be >= 2)",
        "association refused: 2 open",
        "disconnected in the middle of a message",
        "stalled in the middle of a message",
        "unknown",
        "claims 4294967280 bytes",
    ] {
        assert!(
            text.to_lowercase().contains(&why.to_lowercase()),
            "no `{why}` in:\n{text}"
        );
    }
    assert!(
        rss_after < rss_before + 64 * 1024,
        "memory grew from {rss_before} to {rss_after} KiB"
    );
    // No half-received instance is left behind (`.incoming` also keeps finished entries'
    // files for reuse, named free-N).
    let partial: Vec<_> = std::fs::read_dir(out.join(".spool/.incoming"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".part"))
        .collect();
    assert!(partial.is_empty(), "{partial:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An established association on a raw socket (dicom-ul's client, whose stream we then take).
fn unknown_pdu_after_association(port: u16, files: &[Outgoing]) -> TcpStream {
    let scu = associate(port, files);
    scu.into_stream().unwrap()
}

/// Sends a C-STORE command and half of the data set, then closes the connection (or, with
/// `stall`, sends nothing more until the listener drops it).
fn disconnect_mid_instance(port: u16, file: &Outgoing, stall: bool) {
    let scu = associate(port, std::slice::from_ref(file));
    let context = scu.context_for(file).unwrap();
    let mut stream = scu.into_stream().unwrap();
    let command = encode_request(C_STORE_RQ, 1, &file.sop_class, Some(&file.sop_instance));
    let data = std::fs::read(&file.path).unwrap();
    let half = &data[file.data_offset as usize..][..4096];
    let mut bytes = Vec::new();
    for (value_type, is_last, payload) in [
        (PDataValueType::Command, true, command),
        (PDataValueType::Data, false, half.to_vec()),
    ] {
        let pdu = dicom_ul::Pdu::PData {
            data: vec![PDataValue {
                presentation_context_id: context,
                value_type,
                is_last,
                data: payload,
            }],
        };
        dicom_ul::write_pdu(&mut bytes, &pdu).unwrap();
    }
    stream.write_all(&bytes).unwrap();
    if stall {
        // The listener aborts the association after listen.stall_timeout_s (2 s here).
        let got = until_closed(stream);
        assert_eq!(got.first(), Some(&0x07), "expected an A-ABORT, got {got:?}");
    }
}

/// A copy of `src` whose data set starts with an element declaring 0xFFFFFFF0 bytes.
fn write_huge_length_file(src: &Path, dst: &Path) {
    let o = Outgoing::open(src).unwrap();
    let bytes = std::fs::read(src).unwrap();
    let (head, data) = bytes.split_at(o.data_offset as usize);
    let mut out = head.to_vec();
    // (0008,0001) as OB: explicit VR with a 4-byte length.
    out.extend_from_slice(&[
        0x08, 0x00, 0x01, 0x00, b'O', b'B', 0, 0, 0xf0, 0xff, 0xff, 0xff,
    ]);
    out.extend_from_slice(data);
    std::fs::write(dst, out).unwrap();
}

/// The backend opens before the port does (a listener must not acknowledge instances it then
/// cannot render, nor make the first arrivals wait for CUDA's start): where CUDA cannot start,
/// `listen --backend cuda` exits 2 naming the backend and never listens.
#[test]
fn a_backend_that_cannot_start_stops_listen_before_it_listens() {
    if dicomflow::backend::cuda::driver::probe().is_ok() {
        eprintln!("skipped: CUDA starts here, so the backend does not fail");
        return;
    }
    let dir = tempdir("listen-no-backend");
    let out = crate::common::dicomflow(&[
        "listen",
        "--backend",
        "cuda",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--no-tui",
        "-o",
        dir.join("out").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("backend"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
