//! The operator and window-channel kernels (`kernels/ops.cu`, `kernels/channels.cu`) compiled
//! as host C++ — a shim header makes a launch one thread that walks the whole grid-stride loop —
//! and run against the CPU reference on the same inputs and tables: their index and integer
//! arithmetic, checked on any machine with a C++ compiler. (Launch sizes, memory and transfers
//! need a GPU: `tests/it/gpu.rs` compares the real launches.) Skips, saying why, without `c++`.

use crate::common::{compile_cpp, tempdir};

use std::path::Path;
use std::process::Command;

use dicomflow::backend::cpu::CpuRenderer;
use dicomflow::render::chain;
use dicomflow::render::ops::{apply, Fit, Flip, Interpolation, OperatorOptions, Resize, Scratch};
use dicomflow::render::plan::{Chain, FramePlan, GrayPlan, Modality, StoredFormat, Voi, Window};
use dicomflow::render::spec::VoiFunction;
use dicomflow::render::table::{self, IndexMap};

/// Makes a kernel launch a plain loop: one block of one thread, whose grid-stride loop covers
/// every index in order.
const SHIM: &str = r#"
#include <cstdint>
#define __global__
#define __device__
#define __forceinline__ inline
#define __ldg(p) (*(p))
struct Dim { unsigned x; };
static Dim blockIdx = {0}, blockDim = {1}, threadIdx = {0}, gridDim = {1};
"#;

/// Reads cases (length-prefixed arrays), runs the kernels, appends each output to argv[2].
const HARNESS: &str = r#"
#include <cstdio>
#include <vector>
template <typename T> static bool rd(FILE* f, std::vector<T>& v) {
    uint64_t n;
    if (fread(&n, 8, 1, f) != 1) return false;
    v.resize(n);
    return fread(v.data(), sizeof(T), n, f) == n;
}
int main(int argc, char** argv) {
    FILE* f = fopen(argv[1], "rb");
    FILE* o = fopen(argv[2], "wb");
    std::vector<int32_t> p, a, b, c, d;
    std::vector<uint8_t> src;
    while (rd(f, p)) {
        if (p[0] == 0) {
            // ops: src_w, ch, out_w, out_h, oh, m0..m5, invert, gather, cols_ksize, rows_ksize
            rd(f, src); rd(f, a); rd(f, b); rd(f, c); rd(f, d);
            u32 src_w = p[1], ch = p[2], out_w = p[3], out_h = p[4], oh = p[5];
            std::vector<uint8_t> out((size_t)out_w * out_h * ch, 0xAA);
            if (p[13]) {
                ops_gather(src.data(), out.data(), src_w, ch, out_w, out_h, a.data(), c.data(),
                           p[6], p[7], p[8], p[9], p[10], p[11], p[12]);
            } else {
                std::vector<uint8_t> tmp((size_t)out_w * oh * ch, 0x55);
                ops_resample_h(src.data(), tmp.data(), src_w, ch, out_w, oh, a.data(), b.data(),
                               p[14], p[6], p[7], p[8], p[9], p[10], p[11], p[12]);
                ops_resample_v(tmp.data(), out.data(), out_w, ch, out_h, c.data(), d.data(), p[15]);
            }
            fwrite(out.data(), 1, out.size(), o);
        } else {
            // channels: pixels, bytes, shift, mask, len, channels; input; tables
            std::vector<uint8_t> tables;
            rd(f, src); rd(f, tables);
            std::vector<uint8_t> out((size_t)p[1] * 3, 0xAA);
            gray_channels(src.data(), out.data(), p[1], p[2], p[3], p[4], tables.data(), p[5], p[6]);
            fwrite(out.data(), 1, out.size(), o);
        }
    }
    fclose(o);
    fclose(f);
}
"#;

/// Compiles the harness with the kernels; `None` (after saying why) without a C++ compiler.
fn harness(dir: &Path) -> Option<std::path::PathBuf> {
    let source = format!(
        "{SHIM}\n#include \"{{kernels}}/ops.cu\"\n#include \"{{kernels}}/channels.cu\"\n{HARNESS}"
    );
    compile_cpp(dir, "harness", &source, "kernels_on_host")
}

/// Appends a length-prefixed array.
fn put<T: Copy, const N: usize>(buf: &mut Vec<u8>, v: &[T], bytes: fn(T) -> [u8; N]) {
    buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
    for &x in v {
        buf.extend_from_slice(&bytes(x));
    }
}

fn put_i32(buf: &mut Vec<u8>, v: &[i32]) {
    put(buf, v, i32::to_le_bytes);
}

fn put_u8(buf: &mut Vec<u8>, v: &[u8]) {
    put(buf, v, |x: u8| [x]);
}

/// Runs the harness over `cases` and returns its concatenated outputs.
fn run(exe: &Path, dir: &Path, cases: &[u8]) -> Vec<u8> {
    let (input, output) = (dir.join("cases.bin"), dir.join("out.bin"));
    std::fs::write(&input, cases).unwrap();
    let st = Command::new(exe).arg(&input).arg(&output).status().unwrap();
    assert!(st.success(), "harness failed");
    std::fs::read(&output).unwrap()
}

/// The harness's concatenated outputs against each case's expected bytes, in order.
fn compare(got: &[u8], expected: &[(String, Vec<u8>)]) {
    let mut at = 0;
    for (what, want) in expected {
        assert_eq!(&got[at..at + want.len()], &want[..], "{what}");
        at += want.len();
    }
    assert_eq!(at, got.len());
}

fn noise(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn operator_kernels_equal_the_cpu_reference() {
    let dir = tempdir("kernels-ops");
    let Some(exe) = harness(&dir) else {
        return;
    };
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    let mut n = 0u32;
    for (w, h) in [(37u32, 23u32), (64, 64), (17, 40)] {
        for ch in [1usize, 3] {
            let src = noise(w * 131 + h, (w * h) as usize * ch);
            for how in [
                Interpolation::Nearest,
                Interpolation::Bilinear,
                Interpolation::Area,
            ] {
                for fit in [Fit::Stretch, Fit::Pad, Fit::Crop] {
                    for rotate in [0u16, 90, 180, 270] {
                        for flip in [Flip::None, Flip::Horizontal, Flip::Both] {
                            for resize in [
                                Resize::None,
                                Resize::Exact {
                                    width: 16,
                                    height: 30,
                                },
                                Resize::Exact {
                                    width: 50,
                                    height: 9,
                                },
                                Resize::Longest(70),
                                Resize::Scale(0.3),
                            ] {
                                if fit != Fit::Stretch && !matches!(resize, Resize::Exact { .. }) {
                                    continue;
                                }
                                n += 1;
                                let o = OperatorOptions {
                                    resize,
                                    fit,
                                    interpolation: how,
                                    rotate,
                                    flip,
                                    invert: n.is_multiple_of(3),
                                };
                                let Some(op) = o.resolve(w, h).unwrap() else {
                                    continue;
                                };
                                let t = op.tables();
                                let mut want = vec![0u8; (op.out_w * op.out_h) as usize * ch];
                                apply(&op, &t, ch, &src, &mut want, &mut Scratch::default());
                                expected.push((format!("{o:?} on {w}x{h}x{ch}"), want));
                                let m = op.orient;
                                put_i32(
                                    &mut cases,
                                    &[
                                        0,
                                        op.src_w as i32,
                                        ch as i32,
                                        op.out_w as i32,
                                        op.out_h as i32,
                                        op.oriented_h as i32,
                                        m[0],
                                        m[1],
                                        m[2],
                                        m[3],
                                        m[4],
                                        m[5],
                                        op.invert as i32,
                                        t.gather as i32,
                                        t.cols.ksize as i32,
                                        t.rows.ksize as i32,
                                    ],
                                );
                                put_u8(&mut cases, &src);
                                put_i32(&mut cases, &t.cols.bounds);
                                put_i32(&mut cases, &t.cols.weights);
                                put_i32(&mut cases, &t.rows.bounds);
                                put_i32(&mut cases, &t.rows.weights);
                            }
                        }
                    }
                }
            }
        }
    }
    compare(&run(&exe, &dir, &cases), &expected);
    eprintln!(
        "kernels/ops.cu on the host: {} operator cases equal to the CPU reference",
        expected.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn channel_kernel_equals_the_cpu_reference() {
    let dir = tempdir("kernels-channels");
    let Some(exe) = harness(&dir) else {
        return;
    };
    let window = |c: f64, w: f64, f| {
        Voi::Window(Window {
            center: c,
            width: w,
            function: f,
        })
    };
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for (bits_allocated, bits_stored, high_bit, signed) in [
        (8u16, 8u16, 7u16, false),
        (16, 12, 11, false),
        (16, 12, 15, true),
        (16, 16, 15, true),
        (32, 16, 15, false),
    ] {
        for n in [1usize, 2, 3] {
            let stored = StoredFormat {
                bits_allocated,
                bits_stored,
                high_bit,
                signed,
            };
            let base = GrayPlan {
                stored,
                modality: Modality::Rescale {
                    slope: 1.0,
                    intercept: -1024.0,
                },
                voi: Voi::None,
                invert: n == 2,
                pixels: 97 * 13,
            };
            let vois = [
                window(40.0, 80.0, VoiFunction::Linear),
                window(80.0, 200.0, VoiFunction::LinearExact),
                window(600.0, 2800.0, VoiFunction::Sigmoid),
            ];
            let gs: Vec<GrayPlan> = vois[..n]
                .iter()
                .map(|v| GrayPlan {
                    voi: v.clone(),
                    ..base.clone()
                })
                .collect();
            let plan = FramePlan {
                rows: 13,
                cols: 97,
                chain: Chain::Channels(gs.clone()),
                ops: None,
                encoded: None,
                overlay: None,
            };
            let input = noise(bits_stored as u32 * 7 + n as u32, plan.input_bytes());
            let mut want = vec![0u8; plan.output_bytes()];
            CpuRenderer::default()
                .render_bytes(&plan, &input, &mut want)
                .unwrap();
            let map = IndexMap::of(&stored).unwrap();
            let mut tables = Vec::new();
            let mut t = Vec::new();
            for g in &gs {
                let r = chain::resolve(g, None).unwrap();
                table::build_gray_table(g, &r, map, &mut t);
                tables.extend_from_slice(&t);
            }
            put_i32(
                &mut cases,
                &[
                    1,
                    plan.pixels() as i32,
                    stored.bytes() as i32,
                    map.shift as i32,
                    map.mask as i32,
                    map.len() as i32,
                    n as i32,
                ],
            );
            put_u8(&mut cases, &input);
            put_u8(&mut cases, &tables);
            expected.push((format!("{stored:?} with {n} windows"), want));
        }
    }
    compare(&run(&exe, &dir, &cases), &expected);
    std::fs::remove_dir_all(&dir).unwrap();
}
