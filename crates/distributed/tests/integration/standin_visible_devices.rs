//! The CUDA stand-in honours `CUDA_VISIBLE_DEVICES` as the driver does (issue 27 item 3:
//! two "hosts" on one machine split its devices): the listed devices, in that order,
//! renumbered from 0, the list ending at the first entry that is not a device. Each case
//! runs in a child process (the driver reads the variable once). Stand-in only; skipped
//! elsewhere.

use std::process::Command;

const CHILD: &str = "STANDIN_VISIBLE_DEVICES_CHILD";

/// In the child: prints the visible devices' names, one per line.
#[test]
fn child_lists_its_devices() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    for ordinal in 0..tensor_core::cuda::device_count() {
        println!(
            "device {ordinal}: {}",
            tensor_core::cuda::get_device_name(ordinal).unwrap()
        );
    }
}

/// The names the stand-in reports with 4 devices and `visible` as CUDA_VISIBLE_DEVICES.
fn devices_seen(visible: &str) -> Vec<String> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            test_support::exact_name(module_path!(), "child_lists_its_devices").as_str(),
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, "1")
        .env("DITTO_CUDA_STANDIN_DEVICES", "4")
        .env("CUDA_VISIBLE_DEVICES", visible)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // libtest's "test ... " may precede the first line.
        .filter_map(|l| {
            l.find("device ")
                .map(|at| l[at + "device ".len()..].to_string())
        })
        .collect()
}

#[test]
fn cuda_visible_devices_picks_and_renumbers_the_stand_ins_devices() {
    if std::env::var_os("DITTO_CUDA_STANDIN").is_none() {
        println!("skipping: the CUDA stand-in is not loaded (eval \"$(bash scripts/cuda_standin.sh --print-env)\")");
        return;
    }
    let named = |seen: &[String], i: usize, physical: usize| {
        assert!(
            seen[i].starts_with(&format!("{i}: ")) && seen[i].contains(&format!("#{physical} ")),
            "{seen:?}"
        );
    };
    let seen = devices_seen("2,3");
    assert_eq!(seen.len(), 2, "{seen:?}");
    named(&seen, 0, 2);
    named(&seen, 1, 3);
    let seen = devices_seen("3, 0");
    assert_eq!(seen.len(), 2, "{seen:?}");
    named(&seen, 0, 3);
    named(&seen, 1, 0);
    // The list ends at the first entry that is not a device.
    let seen = devices_seen("1,9,0");
    assert_eq!(seen.len(), 1, "{seen:?}");
    named(&seen, 0, 1);
    assert!(devices_seen("").is_empty());
    assert!(devices_seen("-1").is_empty());
}
