//! `dicomflow bench transfer`: how long one 16-bit slice takes to become 8-bit pixels on this
//! machine's GPU for each way of moving it — pageable copies, pinned async copies, zero-copy
//! mapped slots, zero-copy with a write-combined input — for a single slice and for a sustained
//! stream of slices on several streams, beside the PCIe ceiling measured in the same run with
//! large pinned copies. The kernel is the production table-apply kernel. A traffic section
//! times it beside probes (kernels/probes.cu) that move only part of its traffic or move it
//! another way, and prints the floor that the bus sets for any kernel reading through the
//! mapping: on the H200 host SM-issued reads travel as 128-byte requests and reach 51 GB/s
//! where the copy engines reach 55, so a kernel that reads a 2000² slot through the mapping
//! needs 1.08× the copy-engine bound for its reads alone (current table: BENCHMARKS.md).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use dicomflow::backend::cuda::driver::{
    self, Args, CudaError, Device, DeviceBuffer, Event, Function, Module, Stream,
};
use dicomflow::backend::cuda::nvrtc;

/// What to measure.
#[derive(Debug, Clone)]
pub struct TransferBenchOptions {
    /// Square slice sizes.
    pub sizes: Vec<u32>,
    /// Iterations per measurement.
    pub iters: usize,
    /// Stream counts for the sustained runs.
    pub streams: Vec<usize>,
    pub device: usize,
}

/// Host memory for the benchmark: page-locked (mapped) or ordinary.
struct HostMem {
    ptr: *mut u8,
    dptr: u64,
    len: usize,
    pinned: bool,
    _heap: Vec<u8>,
    _region: Option<driver::MappedRegion>,
}

impl HostMem {
    fn pinned(len: usize, write_combined: bool) -> Result<HostMem, CudaError> {
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        let mut flags = cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP
            | cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE;
        if write_combined {
            flags |= cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED;
        }
        // SAFETY: out pointer valid; freed in Drop.
        driver::check("cuMemHostAlloc", unsafe {
            cudarc::driver::sys::cuMemHostAlloc(&mut p, len, flags)
        })?;
        let mut dptr = 0;
        // SAFETY: p is mapped memory.
        driver::check("cuMemHostGetDevicePointer", unsafe {
            cudarc::driver::sys::cuMemHostGetDevicePointer_v2(&mut dptr, p, 0)
        })?;
        Ok(HostMem {
            ptr: p as *mut u8,
            dptr,
            len,
            pinned: true,
            _heap: Vec::new(),
            _region: None,
        })
    }

    /// Huge-page memory registered with `cuMemHostRegister` (the `register` page-locking).
    fn registered(len: usize) -> Result<HostMem, CudaError> {
        let mut region = driver::MappedRegion::new(len)?;
        let dptr = region.register()?;
        Ok(HostMem {
            ptr: region.as_ptr(),
            dptr,
            len,
            pinned: false,
            _heap: Vec::new(),
            _region: Some(region),
        })
    }

    fn pageable(len: usize) -> HostMem {
        let mut v = vec![0u8; len];
        HostMem {
            ptr: v.as_mut_ptr(),
            dptr: 0,
            len,
            pinned: false,
            _heap: v,
            _region: None,
        }
    }

    fn fill(&mut self, seed: u16) {
        // SAFETY: ptr valid for len bytes, exclusively owned.
        let s = unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u16, self.len / 2) };
        for (i, v) in s.iter_mut().enumerate() {
            *v = ((i as u32).wrapping_mul(2654435761) >> 20) as u16 ^ seed;
        }
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        if self.pinned {
            // SAFETY: allocated by cuMemHostAlloc, freed once.
            unsafe { driver::free_host(self.ptr) };
        }
    }
}

struct Ctx {
    device: Arc<Device>,
    _module: Arc<Module>,
    apply: Function,
    /// Divides the thread count gray_apply_u16 would get (8 pixels per thread): 1 for it, more
    /// for the probes that read only part of the slice.
    per_thread: u64,
    /// Fixed grid (bulk-copy probes), else derived from the pixel count.
    grid: Option<u32>,
    table: DeviceBuffer,
}

fn e(err: CudaError) -> String {
    err.to_string()
}

fn launch_apply(
    ctx: &Ctx,
    stream: &Stream,
    input: u64,
    output: u64,
    pixels: u64,
) -> Result<(), CudaError> {
    let args = Args::default()
        .u64(input)
        .u64(output)
        .u64(pixels)
        .u32(0)
        .u32(0x0fff)
        .u64(ctx.table.ptr());
    let groups = pixels.div_ceil(8).div_ceil(ctx.per_thread);
    let grid = ctx
        .grid
        .unwrap_or_else(|| groups.div_ceil(256).clamp(1, 65535 * 8) as u32);
    driver::launch(&ctx.apply, grid, 256, 0, stream, args)
}

/// Best-of-`iters` GB/s of one large copy direction.
fn ceiling(
    ctx: &Ctx,
    stream: &Arc<Stream>,
    iters: usize,
    to_device: bool,
) -> Result<f64, CudaError> {
    let len = 256usize << 20;
    let host = HostMem::pinned(len, false)?;
    let dev = DeviceBuffer::alloc(stream, len)?;
    let (a, b) = (Event::new(&ctx.device)?, Event::new(&ctx.device)?);
    let mut best = f64::INFINITY;
    for _ in 0..iters.max(3) {
        a.record(stream)?;
        // SAFETY: host and dev hold len bytes; synchronized below.
        unsafe {
            if to_device {
                driver::copy_htod_async(dev.ptr(), host.ptr, len, stream)?;
            } else {
                driver::copy_dtoh_async(host.ptr, dev.ptr(), len, stream)?;
            }
        }
        b.record(stream)?;
        b.synchronize()?;
        best = best.min(Event::elapsed_ms(&a, &b)? as f64);
    }
    Ok(len as f64 / (best / 1e3) / 1e9)
}

/// A kernel of the traffic section, launched like gray_apply_u16 on the sustained zero-copy path.
struct Probe {
    kernel: &'static std::ffi::CStr,
    /// Divides the thread count gray_apply_u16 would get (8 pixels per thread).
    per_thread: u64,
    /// A fixed grid, else one block per 256 threads.
    grid: Option<u32>,
    /// Shares of the slice's input it reads and of its output it writes.
    read: f64,
    written: f64,
    /// Also measured on huge-page memory from cuMemHostRegister.
    registered_too: bool,
    /// Uses Hopper's bulk copies (sm_90 and later only).
    sm90: bool,
}

/// One sustained zero-copy (or copy-engine) measurement of the traffic section: the share of
/// the slice's input it reads and of its output it writes give the payload rates.
struct Traffic {
    label: String,
    ms: f64,
    read: f64,
    written: f64,
}

/// One measured configuration.
struct Row {
    size: u32,
    strategy: &'static str,
    mode: String,
    ms: f64,
    bytes: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Single-slice latency (median of `iters`): everything from the stored values on the host to
/// 8-bit pixels on the host, synchronized.
fn single(
    ctx: &Ctx,
    stream: &Arc<Stream>,
    n: u32,
    iters: usize,
    strategy: &str,
) -> Result<f64, CudaError> {
    let pixels = n as usize * n as usize;
    let (in_len, out_len) = (pixels * 2, pixels);
    let mut times = Vec::with_capacity(iters);
    match strategy {
        "pageable" => {
            let mut hin = HostMem::pageable(in_len);
            hin.fill(1);
            let hout = HostMem::pageable(out_len);
            let din = DeviceBuffer::alloc(stream, in_len)?;
            let dout = DeviceBuffer::alloc(stream, out_len)?;
            stream.synchronize()?;
            for _ in 0..iters {
                let t = Instant::now();
                // From pageable memory the driver stages each copy (the call returns once the
                // bytes are staged); on the stream they stay ordered with the kernel.
                // SAFETY: buffers hold the lengths copied; synchronized below.
                unsafe { driver::copy_htod_async(din.ptr(), hin.ptr, in_len, stream)? };
                launch_apply(ctx, stream, din.ptr(), dout.ptr(), pixels as u64)?;
                // SAFETY: as above.
                unsafe { driver::copy_dtoh_async(hout.ptr, dout.ptr(), out_len, stream)? };
                stream.synchronize()?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        "pinned" => {
            let mut hin = HostMem::pinned(in_len, false)?;
            hin.fill(2);
            let hout = HostMem::pinned(out_len, false)?;
            let din = DeviceBuffer::alloc(stream, in_len)?;
            let dout = DeviceBuffer::alloc(stream, out_len)?;
            stream.synchronize()?;
            for _ in 0..iters {
                let t = Instant::now();
                // SAFETY: pinned buffers hold the lengths; synchronized below.
                unsafe {
                    driver::copy_htod_async(din.ptr(), hin.ptr, in_len, stream)?;
                }
                launch_apply(ctx, stream, din.ptr(), dout.ptr(), pixels as u64)?;
                // SAFETY: as above.
                unsafe { driver::copy_dtoh_async(hout.ptr, dout.ptr(), out_len, stream)? };
                stream.synchronize()?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        "zero-copy" | "zero-copy wc-in" => {
            let mut hin = HostMem::pinned(in_len, strategy == "zero-copy wc-in")?;
            hin.fill(3);
            let hout = HostMem::pinned(out_len, false)?;
            for _ in 0..iters {
                let t = Instant::now();
                launch_apply(ctx, stream, hin.dptr, hout.dptr, pixels as u64)?;
                stream.synchronize()?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        _ => {}
    }
    Ok(median(times))
}

/// Sustained throughput: `total` slices spread over `streams` streams, two slot pairs per
/// stream, no synchronization until the end. Returns ms per slice. `strategy`: "pinned" or
/// "zero-copy" (either with " (registered)"), or the copy engines alone: "copies" (H2D and D2H,
/// no kernel) or "copies in" (H2D only).
fn sustained(
    ctx: &Ctx,
    n: u32,
    total: usize,
    streams: usize,
    strategy: &str,
) -> Result<f64, CudaError> {
    let pixels = n as usize * n as usize;
    let (in_len, out_len) = (pixels * 2, pixels);
    let ss: Vec<Arc<Stream>> = (0..streams)
        .map(|_| Stream::new(&ctx.device))
        .collect::<Result<_, _>>()?;
    let pairs = 2 * streams;
    let mut hin = Vec::new();
    let mut hout = Vec::new();
    let mut din = Vec::new();
    let mut dout = Vec::new();
    // "... (registered)": the same with huge-page memory from cuMemHostRegister.
    let registered = strategy.ends_with("(registered)");
    let strategy = strategy.trim_end_matches(" (registered)");
    let host = |len| {
        if registered {
            HostMem::registered(len)
        } else {
            HostMem::pinned(len, false)
        }
    };
    for i in 0..pairs {
        let mut h = host(in_len)?;
        h.fill(i as u16);
        hin.push(h);
        hout.push(host(out_len)?);
        if strategy != "zero-copy" {
            din.push(DeviceBuffer::alloc(&ss[i % streams], in_len)?);
            dout.push(DeviceBuffer::alloc(&ss[i % streams], out_len)?);
        }
    }
    for s in &ss {
        s.synchronize()?;
    }
    let run = |count: usize| -> Result<(), CudaError> {
        for i in 0..count {
            let s = &ss[i % streams];
            let p = i % pairs;
            if strategy != "zero-copy" {
                // SAFETY: buffers hold the lengths; all streams are synchronized before reuse
                // across iterations completes (same stream reuses the same pair in order).
                unsafe { driver::copy_htod_async(din[p].ptr(), hin[p].ptr, in_len, s)? };
                if strategy == "pinned" {
                    launch_apply(ctx, s, din[p].ptr(), dout[p].ptr(), pixels as u64)?;
                }
                if strategy != "copies in" {
                    // SAFETY: as above.
                    unsafe { driver::copy_dtoh_async(hout[p].ptr, dout[p].ptr(), out_len, s)? };
                }
            } else {
                launch_apply(ctx, s, hin[p].dptr, hout[p].dptr, pixels as u64)?;
            }
        }
        for s in &ss {
            s.synchronize()?;
        }
        Ok(())
    };
    run(pairs)?; // warm up
    let t = Instant::now();
    run(total)?;
    Ok(t.elapsed().as_secs_f64() * 1e3 / total as f64)
}

/// CPU memcpy speed into plain pinned vs write-combined memory (GB/s), since the loader writes
/// every slot.
fn cpu_fill_speed(len: usize) -> Result<(f64, f64), CudaError> {
    let src = vec![7u8; len];
    let mut out = [0.0; 2];
    for (k, wc) in [false, true].into_iter().enumerate() {
        let h = HostMem::pinned(len, wc)?;
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            // SAFETY: h.ptr holds len bytes; src is len bytes; no overlap.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), h.ptr, len) };
            best = best.min(t.elapsed().as_secs_f64());
        }
        out[k] = len as f64 / best / 1e9;
    }
    Ok((out[0], out[1]))
}

/// What page-locking slot memory costs, per way of getting it: `cuMemHostAlloc` from one
/// thread and from four at once, and ordinary memory (transparent huge pages asked for,
/// pre-faulted) registered with `cuMemHostRegister`. Returns (label, ms for `count` buffers of
/// `len` bytes); every buffer is freed before the next measurement.
fn page_locking_costs(
    device: &Device,
    count: usize,
    len: usize,
) -> Result<Vec<(String, f64)>, CudaError> {
    let mut rows = Vec::new();
    let t = Instant::now();
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        held.push(HostMem::pinned(len, false)?);
    }
    rows.push(("cuMemHostAlloc, 1 thread".to_string(), ms_since(t)));
    let t = Instant::now();
    drop(held);
    rows.push(("cuMemFreeHost, 1 thread".to_string(), ms_since(t)));

    // Four threads at once (each binds the context): does the driver serialize page-locking?
    let all_allocated = std::sync::Barrier::new(5);
    let t = Instant::now();
    let results: Vec<Result<(), CudaError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|k| {
                let (device, all_allocated) = (device, &all_allocated);
                s.spawn(move || {
                    let held = device.bind().and_then(|_| {
                        (k..count)
                            .step_by(4)
                            .map(|_| HostMem::pinned(len, false))
                            .collect::<Result<Vec<_>, _>>()
                    });
                    all_allocated.wait();
                    held.map(drop)
                })
            })
            .collect();
        all_allocated.wait();
        rows.push(("cuMemHostAlloc, 4 threads".to_string(), ms_since(t)));
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or(Err(CudaError {
                    call: "page-locking thread",
                    code: cudarc::driver::sys::CUresult::CUDA_ERROR_UNKNOWN,
                }))
            })
            .collect()
    });
    for r in results {
        r?;
    }

    let t = Instant::now();
    let mut mapped = Vec::with_capacity(count);
    for _ in 0..count {
        mapped.push(driver::MappedRegion::new(len)?);
    }
    let faulted = ms_since(t);
    let thp = anon_huge_pages();
    let t2 = Instant::now();
    for m in &mut mapped {
        m.register()?;
    }
    let registered = ms_since(t2);
    rows.push((
        format!(
            "huge-page mmap + fault {faulted:.1} ms (AnonHugePages {thp}), \
             cuMemHostRegister {registered:.1} ms"
        ),
        faulted + registered,
    ));
    Ok(rows)
}

/// The process's AnonHugePages line from /proc/self/smaps_rollup (did THP apply?).
fn anon_huge_pages() -> String {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("AnonHugePages"))
                .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "unknown".into())
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// What the traffic section implies (lines of text), from its own measurements:
/// - the payload each SM read request carries: when reading every other 128-byte line moves
///   bytes as fast as reading whole spans, each request carries one 128-byte line, while the
///   copy engines' large requests come back in packets up to the link's 256-byte maximum, and
///   they set the H2D ceiling the bound is taken from;
/// - the floor for a kernel that reads and writes through the mapping: the read-only probe's
///   time, stretched by what the copy engines lose when the output flows back during the input.
fn zero_copy_floor(variants: &[Traffic], bound_ms: f64, in_bytes: f64) -> Vec<String> {
    let ms = |label: &str| variants.iter().find(|t| t.label == label).map(|t| t.ms);
    let (Some(apply), Some(read), Some(half_lines), Some(copies_in), Some(copies_both)) = (
        ms("gray_apply_u16"),
        ms("probe_read_u16"),
        ms("probe_read_128of256"),
        ms("copy engines, H2D only"),
        ms("copy engines, H2D + D2H (no kernel)"),
    ) else {
        return Vec::new();
    };
    let gbs = |bytes: f64, ms: f64| bytes / (ms / 1e3) / 1e9;
    let floor = read * copies_both / copies_in;
    vec![
        format!(
            "  SM reads: {:.1} GB/s reading every byte, {:.1} GB/s reading every other 128-byte line \
             (copy engines {:.1} GB/s)",
            gbs(in_bytes, read),
            gbs(in_bytes / 2.0, half_lines),
            gbs(in_bytes, copies_in),
        ),
        format!(
            "  floor through the mapping = read-only {read:.3} ms x duplex cost {:.3} = {floor:.3} ms \
             = {:.2}x bound; gray_apply_u16 = {:.2}x that floor",
            copies_both / copies_in,
            floor / bound_ms,
            apply / floor
        ),
    ]
}

/// Runs the benchmark and returns the table as text.
pub fn run(opts: &TransferBenchOptions) -> Result<String, String> {
    driver::probe()?;
    let device = Device::open(opts.device).map_err(e)?;
    let cache = nvrtc::cache_dir(None);
    let (image, _) = nvrtc::module_image(device.compute_capability, &cache)?;
    let module = Module::load(&device, &image).map_err(e)?;
    let apply = module.function(c"gray_apply_u16").map_err(e)?;
    let stream = Stream::new(&device).map_err(e)?;
    let table = DeviceBuffer::alloc(&stream, 4096).map_err(e)?;
    let host_table: Vec<u8> = (0..4096u32).map(|i| (i >> 4) as u8).collect();
    // SAFETY: table holds 4096 bytes; host_table outlives the synchronization.
    unsafe { driver::copy_htod_async(table.ptr(), host_table.as_ptr(), 4096, &stream).map_err(e)? };
    stream.synchronize().map_err(e)?;
    let mut ctx = Ctx {
        device: device.clone(),
        _module: module.clone(),
        apply,
        per_thread: 1,
        grid: None,
        table,
    };
    let h2d = ceiling(&ctx, &stream, opts.iters.clamp(3, 25), true).map_err(e)?;
    let d2h = ceiling(&ctx, &stream, opts.iters.clamp(3, 25), false).map_err(e)?;
    let (fill_plain, fill_wc) = cpu_fill_speed(64 << 20).map_err(e)?;
    // A 2000x2000 ring as the pipeline sizes it on 16 cores: 30 slots of 8 MB in + 4 MB out.
    let locking = page_locking_costs(&device, 30, 12_000_000).map_err(e)?;

    let mut rows = Vec::new();
    for &n in &opts.sizes {
        let bytes = n as usize * n as usize * 3;
        for strategy in ["pageable", "pinned", "zero-copy", "zero-copy wc-in"] {
            let ms = single(&ctx, &stream, n, opts.iters, strategy).map_err(e)?;
            rows.push(Row {
                size: n,
                strategy,
                mode: "single".into(),
                ms,
                bytes,
            });
        }
        for &s in &opts.streams {
            for strategy in [
                "pinned",
                "zero-copy",
                "pinned (registered)",
                "zero-copy (registered)",
            ] {
                let total = (opts.iters * 4).max(4 * s);
                let ms = sustained(&ctx, n, total, s, strategy).map_err(e)?;
                rows.push(Row {
                    size: n,
                    strategy,
                    mode: format!("sustained {s} stream{}", if s == 1 { "" } else { "s" }),
                    ms,
                    bytes,
                });
            }
        }
    }

    // The production kernel beside read-only and write-only probes of the same shape on the
    // sustained zero-copy path: what mapped reads and writes reach alone on this bus.
    let n = opts
        .sizes
        .iter()
        .copied()
        .find(|&s| s == 2000)
        .unwrap_or(opts.sizes[0]);
    let s = opts.streams.iter().copied().max().unwrap_or(1);
    let mut variants = Vec::new();
    // No probe for what was measured and dropped on the H200 at 2000²: two or four 16-byte
    // loads in flight per thread (0.166 / 0.169 ms), grids of 132 to 1056 blocks (0.163 ms
    // for every grid) and bulk (TMA) copies both ways (0.166–0.189 ms) were no faster than
    // gray_apply_u16: the mapped reads set the pace, not the kernel.
    let sms = device.multiprocessors;
    let probe = |kernel, per_thread, read, written| Probe {
        kernel,
        per_thread,
        grid: None,
        read,
        written,
        registered_too: false,
        sm90: false,
    };
    let probes = [
        Probe {
            registered_too: true,
            ..probe(c"gray_apply_u16", 1, 1.0, 1.0)
        },
        Probe {
            registered_too: true,
            ..probe(c"probe_read_u16", 1, 1.0, 0.0)
        },
        Probe {
            registered_too: true,
            ..probe(c"probe_write_u16", 1, 0.0, 1.0)
        },
        probe(c"probe_read_32of256", 8, 0.125, 0.0),
        probe(c"probe_read_64of256", 4, 0.25, 0.0),
        probe(c"probe_read_128of256", 2, 0.5, 0.0),
        Probe {
            grid: Some(2 * sms),
            sm90: true,
            ..probe(c"probe_read_prefetch", 1, 1.0, 0.0)
        },
        Probe {
            grid: Some(sms),
            sm90: true,
            ..probe(c"probe_read_bulk", 1, 1.0, 0.0)
        },
        Probe {
            grid: Some(sms),
            sm90: true,
            ..probe(c"probe_write_bulk", 1, 0.0, 1.0)
        },
    ];
    for p in probes {
        if p.sm90 && device.compute_capability.0 < 9 {
            continue;
        }
        ctx.apply = module.function(p.kernel).map_err(e)?;
        ctx.per_thread = p.per_thread;
        ctx.grid = p.grid;
        let total = (opts.iters * 4).max(4 * s);
        let memories: &[&str] = if p.registered_too {
            &["zero-copy", "zero-copy (registered)"]
        } else {
            &["zero-copy"]
        };
        for &memory in memories {
            let ms = sustained(&ctx, n, total, s, memory).map_err(e)?;
            let mut label = p.kernel.to_string_lossy().into_owned();
            if let Some(g) = p.grid {
                label.push_str(&format!(" ({g} blocks)"));
            }
            if memory != "zero-copy" {
                label.push_str(" (registered)");
            }
            variants.push(Traffic {
                label,
                ms,
                read: p.read,
                written: p.written,
            });
        }
    }
    // The copy engines alone, moving one slice's bytes per step on the same streams: inbound
    // only, and both directions at once. The bound assumes each direction runs at its
    // one-way ceiling while the other is busy; the duplex row shows what this link gives.
    let total = (opts.iters * 4).max(4 * s);
    for (label, strategy) in [
        ("copy engines, H2D only", "copies in"),
        ("copy engines, H2D + D2H (no kernel)", "copies"),
    ] {
        variants.push(Traffic {
            label: label.to_string(),
            ms: sustained(&ctx, n, total, s, strategy).map_err(e)?,
            read: 1.0,
            written: if strategy == "copies" { 1.0 } else { 0.0 },
        });
    }

    let mut out = String::new();
    let _ = writeln!(
        out,
        "dicomflow bench transfer — GPU {}: {} (sm_{}{}), {} iterations",
        device.ordinal,
        device.name,
        device.compute_capability.0,
        device.compute_capability.1,
        opts.iters
    );
    let _ = writeln!(
        out,
        "ceiling (pinned 256 MiB copies, best of run): H2D {h2d:.1} GB/s, D2H {d2h:.1} GB/s; \
         CPU fill of pinned memory {fill_plain:.1} GB/s, write-combined {fill_wc:.1} GB/s"
    );
    let _ = writeln!(
        out,
        "{:<11} {:<24} {:<20} {:>10} {:>9} {:>12} {:>9}",
        "slice", "strategy", "mode", "ms/slice", "GB/s", "PCIe bound", "ratio"
    );
    for r in &rows {
        let px = r.size as f64 * r.size as f64;
        let bound_ms = (px * 2.0 / (h2d * 1e9)).max(px / (d2h * 1e9)) * 1e3;
        let _ = writeln!(
            out,
            "{:<11} {:<24} {:<20} {:>10.3} {:>9.1} {:>9.3} ms {:>8.2}x",
            format!("{0}x{0}", r.size),
            r.strategy,
            r.mode,
            r.ms,
            r.bytes as f64 / (r.ms / 1e3) / 1e9,
            bound_ms,
            r.ms / bound_ms
        );
    }
    let _ = writeln!(
        out,
        "PCIe bound = max(bytes in / H2D, bytes out / D2H), 16-bit in, 8-bit out; GB/s counts bytes in + out."
    );
    let px = n as f64 * n as f64;
    let bound_ms = (px * 2.0 / (h2d * 1e9)).max(px / (d2h * 1e9)) * 1e3;
    let _ = writeln!(
        out,
        "zero-copy traffic, {n}x{n}, sustained on {s} streams (probes move the same bytes):"
    );
    let _ = writeln!(
        out,
        "  {:<40} {:>8} {:>7} {:>9} {:>9}",
        "traffic", "ms/slice", "bound", "in GB/s", "out GB/s"
    );
    for t in &variants {
        let rate = |fraction: f64, bytes: f64| fraction * bytes / (t.ms / 1e3) / 1e9;
        let _ = writeln!(
            out,
            "  {:<40} {:>8.3} {:>6.2}x {:>9.1} {:>9.1}",
            t.label,
            t.ms,
            t.ms / bound_ms,
            rate(t.read, px * 2.0),
            rate(t.written, px)
        );
    }
    for line in zero_copy_floor(&variants, bound_ms, px * 2.0) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "page-locking a 2000x2000 slot ring (30 x 12 MB):");
    for (label, ms) in locking {
        let _ = writeln!(out, "  {label:<90} {ms:>8.1} ms");
    }
    Ok(out)
}

/// `dicomflow bench transfer`: prints the table; exit 2 without a usable GPU.
pub fn execute(a: &crate::app::cli::TransferArgs) -> Result<i32, dicomflow::error::FatalError> {
    let opts = TransferBenchOptions {
        sizes: a.sizes.clone(),
        iters: a.iters.max(3),
        streams: a.streams.clone(),
        device: a.device,
    };
    let table = run(&opts).map_err(dicomflow::error::FatalError::Backend)?;
    crate::app::print::out(&table)
        .map_err(|e| dicomflow::error::FatalError::Other(format!("writing to stdout: {e}")))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traffic(label: &str, ms: f64) -> Traffic {
        Traffic {
            label: label.into(),
            ms,
            read: 1.0,
            written: 0.0,
        }
    }

    #[test]
    fn the_floor_is_the_read_only_time_stretched_by_the_copy_engines_duplex_cost() {
        let variants = [
            traffic("gray_apply_u16", 0.1764),
            traffic("probe_read_u16", 0.160),
            traffic("probe_read_128of256", 0.080),
            traffic("copy engines, H2D only", 0.140),
            traffic("copy engines, H2D + D2H (no kernel)", 0.147),
        ];
        let lines = zero_copy_floor(&variants, 0.140, 8e6);
        assert_eq!(lines.len(), 2, "{lines:?}");
        // 8 MB in 0.160 ms; 4 MB in 0.080 ms; 8 MB in 0.140 ms.
        assert!(
            lines[0].contains("50.0 GB/s reading every byte"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("50.0 GB/s reading every other"),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("copy engines 57.1 GB/s"), "{}", lines[0]);
        // 0.160 x 1.05 = 0.168 ms = 1.20x the bound; 0.1764 / 0.168 = 1.05.
        assert!(
            lines[1].contains("duplex cost 1.050 = 0.168 ms"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("= 1.20x bound"), "{}", lines[1]);
        assert!(lines[1].contains("1.05x that floor"), "{}", lines[1]);
    }

    #[test]
    fn no_floor_without_every_measurement_it_needs() {
        let variants = [traffic("gray_apply_u16", 0.165)];
        assert!(zero_copy_floor(&variants, 0.140, 8e6).is_empty());
    }
}
