//! With the `gloo` feature, compiles the C++ shim over Gloo's headers
//! (`src/gloo/shim.cpp`) and links `libgloo`. Gloo has no C API and no pkg-config file,
//! so the headers and library are looked for where Debian's `libgloo-dev` puts them, or
//! under `GLOO_HOME` (`$GLOO_HOME/include`, `$GLOO_HOME/lib`) for a build of one's own.
//! Without the feature this script does nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GLOO_HOME");
    #[cfg(feature = "gloo")]
    build_shim();
}

#[cfg(feature = "gloo")]
fn build_shim() {
    use std::path::PathBuf;

    let home = std::env::var_os("GLOO_HOME").map(PathBuf::from);
    let (include, lib) = match &home {
        Some(home) => (home.join("include"), Some(home.join("lib"))),
        None => (PathBuf::from("/usr/include"), None),
    };
    if !include.join("gloo/allreduce.h").is_file() {
        // A build script's panic is how cargo reports a build error; this one names the fix.
        panic!(
            "the `gloo` feature needs Gloo's headers, and {} has no gloo/allreduce.h: \
             install Debian's package (apt-get install libgloo-dev) or set GLOO_HOME to a \
             Gloo install (GLOO_HOME/include, GLOO_HOME/lib)",
            include.display()
        );
    }
    println!("cargo:rerun-if-changed=src/gloo/shim.cpp");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(&include)
        .file("src/gloo/shim.cpp")
        .warnings(false)
        .compile("ditto_gloo_shim");
    if let Some(lib) = lib {
        println!("cargo:rustc-link-search=native={}", lib.display());
    }
    println!("cargo:rustc-link-lib=dylib=gloo");
}
