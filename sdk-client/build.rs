//! Embeds the browser SDK (`js/`, plain ES modules) so the scheduler and every node can serve it
//! at `/sdk/{file}` from the binary.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // The manifest dir as cargo sets it for this run, not `env!` (baked in when the build script
    // was compiled: a target dir shared between checkouts would read another checkout's files).
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&manifest).join("js");
    println!("cargo:rerun-if-changed={}", dir.display());
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading the browser SDK at {}: {e}", dir.display()));
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".js") || n.ends_with(".d.ts"))
        .collect();
    if !names.iter().any(|n| n == "ferry.js") {
        panic!("the browser SDK at {} has no ferry.js", dir.display());
    }
    names.sort();
    let mut out = String::from(
        "/// The browser SDK's files: (name, contents).\npub static FILES: &[(&str, &str)] = &[\n",
    );
    for n in &names {
        println!("cargo:rerun-if-changed={}", dir.join(n).display());
        let _ = writeln!(
            out,
            "    ({n:?}, include_str!({:?})),",
            dir.join(n).display().to_string()
        );
    }
    out.push_str("];\n");
    let dest =
        Path::new(&std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into())).join("js_files.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        panic!("writing {}: {e}", dest.display());
    }
}
