//! Whether a many-process NCCL program can run here: it needs the CUDA stand-in's NCCL
//! (its ranks are processes on one host; one real GPU cannot hold two ranks).

/// True when the CUDA stand-in and its NCCL are in this environment. Otherwise prints
/// that `program` skipped, or fails under `REQUIRE_GPU=1`, where a skip would hide a
/// broken set-up.
#[cfg(feature = "nccl")]
pub fn standin_nccl_or_skip(program: &str) -> bool {
    if std::env::var_os("DITTO_CUDA_STANDIN").is_some() && distributed::is_nccl_available() {
        return true;
    }
    assert!(
        std::env::var("REQUIRE_GPU").as_deref() != Ok("1"),
        "REQUIRE_GPU=1 but the CUDA stand-in's NCCL is not in the environment"
    );
    println!("{program}: needs the CUDA stand-in's NCCL; skipped");
    false
}
