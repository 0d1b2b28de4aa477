//! Records the compiler version for the report's `versions.rustc`.
fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Ok(out) = std::process::Command::new(rustc).arg("-V").output() {
        if let Ok(v) = String::from_utf8(out.stdout) {
            println!("cargo:rustc-env=DICOMFLOW_RUSTC_VERSION={}", v.trim());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
