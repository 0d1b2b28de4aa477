//! Finding NVIDIA's codec libraries (nvJPEG, nvJPEG2000, nvCOMP) at run time. They are loaded
//! with `dlopen` like libcuda, so the binary builds and runs without them: a missing library turns
//! off only the codec that needs it.
//!
//! Search order, first hit wins (what [`search_dirs`] lists, then the loader):
//! 1. `gpu.library_path` from the configuration (a folder);
//! 2. the dynamic loader's own search (`LD_LIBRARY_PATH`, `ld.so.cache`), by soname;
//! 3. the CUDA toolkit, `/usr/local/cuda/lib64` (and `$CUDA_HOME/lib64`);
//! 4. the `nvidia/*/lib*` folders of the Python environments whose `bin/` is on `PATH`, where
//!    `pip install nvidia-nvjpeg2k-cu13 nvidia-nvjpeg nvidia-libnvcomp-cu13` puts them (also the
//!    user site, `~/.local/lib/python3*/site-packages`).

use std::path::{Path, PathBuf};

/// A codec library that loaded, and where it came from.
pub struct FoundLibrary {
    /// The open library; symbols are looked up with [`libloading::Library::get`].
    pub library: libloading::Library,
    /// The file that was opened (for the loader's own search, the soname as given).
    pub path: PathBuf,
}

impl std::fmt::Debug for FoundLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoundLibrary")
            .field("path", &self.path)
            .finish()
    }
}

/// Copies the function pointer of type `T` named `name` out of `library` (`what` names the
/// library in the error).
///
/// # Safety
/// `T` must be the exact `extern "C"` signature of the symbol, and the pointer must not be
/// called after `library` is unloaded (keep the [`FoundLibrary`] beside it).
pub unsafe fn symbol<T: Copy>(
    library: &libloading::Library,
    what: &str,
    name: &str,
) -> Result<T, String> {
    // SAFETY: forwarded contract.
    unsafe { library.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("{what}: {name}: {e}"))
}

/// Why no candidate of a library loaded: every place tried, with the loader's reason for the
/// last one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{soname} not found (looked in {}{})", .tried.join(", "), .last_error.as_deref().map(|e| format!("; {e}")).unwrap_or_default())]
pub struct NotFound {
    pub soname: String,
    pub tried: Vec<String>,
    pub last_error: Option<String>,
}

/// Opens the first of `sonames` (e.g. `["libnvjpeg2k.so.0"]`) found in the search order of
/// this module's documentation; `configured` is `gpu.library_path`.
pub fn open(sonames: &[&str], configured: Option<&Path>) -> Result<FoundLibrary, NotFound> {
    // Candidates in order: a path in a folder (tried only where the file exists), or a bare
    // soname for the loader's own search.
    let (before, after) = search_dirs(configured);
    let in_dirs = |dirs: &[PathBuf]| -> Vec<(PathBuf, String)> {
        dirs.iter()
            .flat_map(|d| {
                sonames
                    .iter()
                    .map(move |n| (d.join(n), d.display().to_string()))
            })
            .collect()
    };
    let candidates = in_dirs(&before)
        .into_iter()
        .chain(
            sonames
                .iter()
                .map(|n| (PathBuf::from(n), "the loader's paths".to_string())),
        )
        .chain(in_dirs(&after));
    let mut tried: Vec<String> = Vec::new();
    let mut last_error = None;
    for (path, label) in candidates {
        if tried.last() != Some(&label) {
            tried.push(label.clone());
        }
        if path.is_absolute() && !path.exists() {
            continue;
        }
        // SAFETY: loading a shared library runs its initializers; NVIDIA's codec libraries have
        // none that depend on the loading program, and only the names and folders documented
        // above are loaded.
        match unsafe { libloading::Library::new(&path) } {
            Ok(library) => return Ok(FoundLibrary { library, path }),
            Err(e) => last_error = Some(e.to_string()),
        }
    }
    Err(NotFound {
        soname: sonames.join(" or "),
        tried,
        last_error,
    })
}

/// The folders searched before the loader's own search (the configured one) and after it (the
/// CUDA toolkit, then Python environments), in order, without duplicates.
pub fn search_dirs(configured: Option<&Path>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let before: Vec<PathBuf> = configured.map(Path::to_path_buf).into_iter().collect();
    let mut after = Vec::new();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        after.push(PathBuf::from(home).join("lib64"));
    }
    after.push(PathBuf::from("/usr/local/cuda/lib64"));
    let mut envs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .filter_map(|bin| bin.parent().map(Path::to_path_buf))
                .collect()
        })
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        envs.push(PathBuf::from(home).join(".local"));
    }
    for env in envs {
        after.extend(python_nvidia_lib_dirs(&env));
    }
    let mut seen = std::collections::HashSet::new();
    after.retain(|d| seen.insert(d.clone()));
    (before, after)
}

/// `ENV/lib/python3*/site-packages/nvidia/*/lib*` folders that exist, sorted (deterministic).
fn python_nvidia_lib_dirs(env: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(pythons) = std::fs::read_dir(env.join(lib)) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = pythons
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages").join("nvidia"))
            .collect();
        pythons.sort();
        for nvidia in pythons {
            let Ok(packages) = std::fs::read_dir(&nvidia) else {
                continue;
            };
            let mut packages: Vec<PathBuf> =
                packages.filter_map(Result::ok).map(|e| e.path()).collect();
            packages.sort();
            for package in packages {
                // Wheels use `lib` (nvjpeg2k, cu13) or `lib64` (libnvcomp).
                for sub in ["lib", "lib64"] {
                    let d = package.join(sub);
                    if d.is_dir() {
                        out.push(d);
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_environments_are_searched_for_nvidia_wheels() {
        let env = crate::scratch_dir("libs-pyenv");
        let site = env.join("lib/python3.12/site-packages/nvidia");
        std::fs::create_dir_all(site.join("nvjpeg2k/lib")).unwrap();
        std::fs::create_dir_all(site.join("libnvcomp/lib64")).unwrap();
        std::fs::create_dir_all(site.join("cu13/include")).unwrap();
        let dirs = python_nvidia_lib_dirs(&env);
        assert_eq!(
            dirs,
            vec![site.join("libnvcomp/lib64"), site.join("nvjpeg2k/lib")]
        );
        std::fs::remove_dir_all(&env).unwrap();
    }

    #[test]
    fn a_missing_library_says_where_it_looked() {
        let dir = crate::scratch_dir("libs-missing");
        let err = open(&["libdicomflow-no-such-codec.so.0"], Some(&dir)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("libdicomflow-no-such-codec.so.0 not found"),
            "{text}"
        );
        assert!(text.contains("the loader's paths"), "{text}");
        assert!(text.contains("/usr/local/cuda/lib64"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_configured_folder_comes_first() {
        let (before, after) = search_dirs(Some(Path::new("/opt/codecs")));
        assert_eq!(before, vec![PathBuf::from("/opt/codecs")]);
        assert!(after.contains(&PathBuf::from("/usr/local/cuda/lib64")));
    }
}
