//! `is_nccl_available()` answers without panicking, in builds with and without the
//! `nccl` feature; without the library, asking for the backend is a typed error.

use distributed::{is_nccl_available, Backend, DistError};

#[test]
fn availability_is_a_plain_answer() {
    let available = is_nccl_available();
    if cfg!(not(feature = "nccl")) {
        assert!(!available, "a build without the nccl feature has no NCCL");
    }
    // CI machines have no NCCL; DITTO_EXPECT_NCCL=1 (the GPU bundle) says they should.
    if std::env::var("DITTO_EXPECT_NCCL").as_deref() == Ok("1") {
        assert!(available, "NCCL was expected on this machine");
    }
    println!("is_nccl_available() = {available}");
}

#[cfg(feature = "nccl")]
#[test]
fn without_the_library_the_backend_is_a_typed_error() {
    if is_nccl_available() {
        println!("NCCL is present; the unavailable path is not reachable here");
        return;
    }
    let unavailable = |e: DistError| {
        matches!(
            e,
            DistError::BackendUnavailable {
                backend: Backend::Nccl,
                ..
            }
        )
    };
    assert!(unavailable(distributed::unique_id().unwrap_err()));
    assert!(unavailable(distributed::nccl_version().unwrap_err()));
    assert!(unavailable(
        distributed::NcclGroup::new(0, 1, 0, &[0; 128]).unwrap_err()
    ));
    let bad_rank = distributed::NcclGroup::new(3, 2, 0, &[0; 128]).unwrap_err();
    assert!(
        matches!(bad_rank, DistError::InvalidArgument { .. }),
        "{bad_rank}"
    );
}

#[cfg(not(feature = "nccl"))]
#[test]
fn the_backend_name_still_parses() {
    assert_eq!("nccl".parse::<Backend>().unwrap(), Backend::Nccl);
    let _ = DistError::BackendUnavailable {
        backend: Backend::Nccl,
        reason: String::new(),
    };
}

/// With the library (e.g. `scripts/install_cuda_wheels.sh --nccl`) but without a GPU:
/// the version and a unique id come from NCCL itself, and joining a group is a typed
/// error from the CUDA side, not a panic.
#[cfg(feature = "nccl")]
#[test]
fn with_the_library_but_no_gpu_joining_is_a_typed_error() {
    if !is_nccl_available() {
        println!("no NCCL library here; nothing to check");
        return;
    }
    let version = distributed::nccl_version().unwrap();
    println!("NCCL version {version}");
    assert!(version >= 2_00_00, "{version}");
    let id = distributed::unique_id().unwrap();
    assert!(id.iter().any(|&b| b != 0), "an id carries rank 0's address");
    if !tensor_core::cuda::is_available() {
        let e = distributed::NcclGroup::new(0, 1, 0, &id).unwrap_err();
        assert!(matches!(e, DistError::Tensor(_)), "{e}");
    }
}
