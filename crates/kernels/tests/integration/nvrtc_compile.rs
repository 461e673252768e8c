//! Compiles every ditto kernel with the real NVRTC for sm_80 and sm_90, with the options
//! the launchers use (`--fmad=false` above all), and checks the PTX for what would break
//! bit-identical results: a fused multiply-add or an approximate math instruction.
//!
//! Needs libnvrtc (scripts/install_cuda_wheels.sh, then export the LD_LIBRARY_PATH it
//! prints). Without it the test prints why and passes, except under `CI=true`, where a
//! missing NVRTC is a failure (docs/contract.md §11). With `DITTO_PTXAS` pointing at
//! ptxas (`install_cuda_wheels.sh --ptxas`), it also prints registers and spills per
//! kernel.
#![cfg(feature = "cuda")]

use std::process::Command;

use kernels::nvrtc;
use kernels::source::{ATTENTION_KERNEL_NAMES, KERNEL_NAMES};

const ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// True when NVRTC is there; otherwise skips (or fails under CI=true).
fn nvrtc_or_skip() -> bool {
    match nvrtc::ensure_available() {
        Ok(()) => true,
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true requires NVRTC: {e}");
            }
            println!("skipping: {e}");
            false
        }
    }
}

#[test]
fn every_kernel_compiles_without_fma_or_approximations() {
    if !nvrtc_or_skip() {
        return;
    }
    let (major, minor) = nvrtc::version().expect("nvrtcVersion");
    println!(
        "NVRTC {major}.{minor}, supports {:?}",
        nvrtc::supported_archs().unwrap()
    );
    for arch in ARCHS {
        let ptx = nvrtc::compile(arch)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_src();
        for name in KERNEL_NAMES {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch}: no kernel {name}"
            );
        }
        // --fmad=false: every float multiply and add is a separate, explicitly rounded
        // instruction (which the driver's JIT may not fuse either).
        for forbidden in ["fma.", "mad.f32", "mad.rn.f", ".approx", ".ftz"] {
            assert!(!ptx.contains(forbidden), "{arch}: PTX contains {forbidden}");
        }
        for required in [
            "mul.rn.f32",
            "add.rn.f32",
            "div.rn.f32",
            "sqrt.rn.f32",
            "mul.rn.f64",
        ] {
            assert!(ptx.contains(required), "{arch}: PTX lacks {required}");
        }
        println!(
            "{arch}: {} kernels, {} bytes of PTX",
            KERNEL_NAMES.len(),
            ptx.len()
        );
        report_registers(arch, &ptx);
        // The fused attention's own unit, under the same options. Its expf / logf are
        // libdevice's, whose bodies use fma and ex2.approx by design (deterministic too,
        // as the tensor ops' softmax), so only the kernel's own arithmetic is checked:
        // unfused multiplies and adds, and no atomics (its sums have a fixed order).
        let source = &nvrtc::ATTENTION_SOURCE;
        let ptx = tensor_core::cuda::nvrtc::compile(&(source.text)(), source.file_name, arch)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_src();
        for name in ATTENTION_KERNEL_NAMES {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch}: no {name}"
            );
        }
        for forbidden in ["mad.f32", "mad.rn.f", "\tatom.", "\tred."] {
            assert!(
                !ptx.contains(forbidden),
                "{arch}: attention PTX contains {forbidden}"
            );
        }
        for required in ["mul.rn.f32", "add.rn.f32", "div.rn.f32", "bar.sync"] {
            assert!(
                ptx.contains(required),
                "{arch}: attention PTX lacks {required}"
            );
        }
        report_registers(arch, &ptx);
    }
}

#[test]
fn device_arch_choice_stays_within_what_nvrtc_supports() {
    if !nvrtc_or_skip() {
        return;
    }
    assert_eq!(nvrtc::arch_for(9, 0).unwrap(), "compute_90");
    assert_eq!(nvrtc::arch_for(8, 0).unwrap(), "compute_80");
    // A GPU newer than this NVRTC gets the newest virtual arch it knows (PTX JITs forward).
    let newest = *nvrtc::supported_archs().unwrap().iter().max().unwrap();
    assert_eq!(nvrtc::arch_for(99, 9).unwrap(), format!("compute_{newest}"));
    assert!(nvrtc::arch_for(1, 0).is_err());
}

#[test]
fn a_compile_error_carries_the_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let err = nvrtc::compile("sm_1").unwrap_err();
    assert!(
        matches!(
            err,
            kernels::KernelError::Nvrtc(tensor_core::NvrtcError::Compile { .. })
        ),
        "{err}"
    );
}

/// Runs `ptxas -v` on the PTX when `DITTO_PTXAS` is set, printing registers and spills.
fn report_registers(arch: &str, ptx: &str) {
    let Ok(ptxas) = std::env::var("DITTO_PTXAS") else {
        println!("{arch}: set DITTO_PTXAS to report registers and spills");
        return;
    };
    let dir = std::env::temp_dir().join(format!("ditto-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx_path = dir.join(format!("random_{arch}.ptx"));
    std::fs::write(&ptx_path, ptx).unwrap();
    let output = Command::new(&ptxas)
        .args(["-v", "--gpu-name", arch, "-o"])
        .arg(dir.join(format!("random_{arch}.cubin")))
        .arg(&ptx_path)
        .output()
        .expect("run ptxas");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "ptxas failed:\n{log}");
    let mut function = String::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            function = rest.split('\'').next().unwrap_or("").to_string();
        }
        if line.contains("Used") {
            let spills = log_spills(&log, &function);
            println!(
                "{arch} {function:<32} {} | {spills}",
                line.trim().trim_start_matches("ptxas info    : ")
            );
        }
    }
    assert!(!log.contains("bytes spill stores") || log.contains("0 bytes spill stores"));
}

/// The "N bytes stack frame, N bytes spill stores, N bytes spill loads" line of `function`.
fn log_spills(log: &str, function: &str) -> String {
    let mut current = "";
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            current = rest.split('\'').next().unwrap_or("");
        }
        if current == function && line.contains("spill stores") {
            return line
                .trim()
                .trim_start_matches("ptxas info    : ")
                .to_string();
        }
    }
    String::new()
}
