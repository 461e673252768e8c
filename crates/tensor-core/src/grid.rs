//! Launch geometry: how many thread blocks of how many threads a kernel runs with, for
//! every ditto kernel (tensor-core's tensor ops and the `kernels` crate's random ops).
//!
//! The geometry changes speed only, never values: every kernel is a grid-stride loop
//! whose work items (Philox blocks, output elements, lanes) are each computed by one
//! thread in a fixed order. Tests prove that by forcing several geometries with
//! [`Launch::Fixed`]; everyone else uses [`Launch::Auto`]. Plain numbers, no CUDA
//! needed, so this builds everywhere.

use std::sync::atomic::{AtomicU64, Ordering};

/// A 1-D launch: `blocks` thread blocks of `threads` threads each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    /// Thread blocks in the grid (at least 1).
    pub blocks: u32,
    /// Threads per block (1 to 1024).
    pub threads: u32,
}

/// How a launcher picks its [`Grid`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Launch {
    /// Chosen from the device: enough 256-thread blocks to fill every SM a few times
    /// over, fewer when there is less work.
    #[default]
    Auto,
    /// Exactly this grid, for tests that check results do not depend on it.
    Fixed(Grid),
}

/// Threads per block for [`Launch::Auto`].
pub const AUTO_THREADS: u32 = 256;
/// Resident 256-thread blocks per SM that [`Launch::Auto`] aims for (2048 threads, the
/// most an SM of compute capability 8.0 / 9.0 holds).
pub const AUTO_BLOCKS_PER_SM: u32 = 8;

impl Launch {
    /// The [`Launch::Auto`] grid for `work_items` independent items on a device with
    /// `sm_count` SMs: enough 256-thread blocks to cover the work, at most
    /// [`AUTO_BLOCKS_PER_SM`] per SM.
    #[must_use]
    pub fn auto_grid(work_items: u64, sm_count: u32) -> Grid {
        let wanted = work_items.div_ceil(u64::from(AUTO_THREADS)).max(1);
        let cap = u64::from(sm_count.max(1)) * u64::from(AUTO_BLOCKS_PER_SM);
        Grid {
            blocks: u32::try_from(wanted.min(cap)).unwrap_or(u32::MAX),
            threads: AUTO_THREADS,
        }
    }

    /// The grid for `work_items` independent items (Philox blocks, mask words, output
    /// elements) on a device with `sm_count` SMs. `None` for a fixed grid outside CUDA's
    /// limits.
    #[must_use]
    pub fn grid(self, work_items: u64, sm_count: u32) -> Option<Grid> {
        match self {
            Launch::Auto => Some(Launch::auto_grid(work_items, sm_count)),
            Launch::Fixed(g) => {
                let ok = g.blocks >= 1 && g.blocks < (1 << 31) && (1..=1024).contains(&g.threads);
                ok.then_some(g)
            }
        }
    }
}

/// The grid forced on tensor-core's tensor-op kernels (0: none), packed as
/// `blocks << 32 | threads`.
static FORCED_TENSOR_OPS_GRID: AtomicU64 = AtomicU64::new(0);

/// Forces every later tensor-op kernel launch (tensor-core's `cuda/tensor_ops.cu`) onto
/// `grid`, or back to [`Launch::Auto`] with `None`. Process-wide, for tests that show a
/// result does not depend on the launch configuration (grid-stride loops make any grid
/// valid). Returns `false`, changing nothing, for a grid outside CUDA's limits.
pub fn force_tensor_ops_grid(grid: Option<Grid>) -> bool {
    let packed = match grid {
        None => 0,
        Some(g) => match Launch::Fixed(g).grid(1, 1) {
            Some(g) => (u64::from(g.blocks) << 32) | u64::from(g.threads),
            None => return false,
        },
    };
    FORCED_TENSOR_OPS_GRID.store(packed, Ordering::Relaxed);
    true
}

/// The grid of a tensor-op kernel over `work_items` on a device with `sm_count` SMs:
/// the forced one if a test set one, else [`Launch::auto_grid`].
#[must_use]
pub fn tensor_ops_grid(work_items: u64, sm_count: u32) -> Grid {
    match FORCED_TENSOR_OPS_GRID.load(Ordering::Relaxed) {
        0 => Launch::auto_grid(work_items, sm_count),
        packed => Grid {
            blocks: (packed >> 32) as u32,
            threads: packed as u32,
        },
    }
}

/// Threads per block of the block-per-row kernels (`cuda/row_ops.cu`): one warp.
pub const ROW_THREADS: u32 = 32;
/// Resident blocks per SM the block-per-row kernels aim for (1,024 threads).
pub const ROW_BLOCKS_PER_SM: u32 = 32;

/// The grid of a block-per-row kernel over `rows` rows: the forced one if a test set one
/// (its block size too: those kernels work with any), else a block of [`ROW_THREADS`]
/// per row, at most [`ROW_BLOCKS_PER_SM`] per SM (each block then takes further rows).
#[must_use]
pub fn tensor_ops_row_grid(rows: u64, sm_count: u32) -> Grid {
    match FORCED_TENSOR_OPS_GRID.load(Ordering::Relaxed) {
        0 => {
            let cap = u64::from(sm_count.max(1)) * u64::from(ROW_BLOCKS_PER_SM);
            Grid {
                blocks: u32::try_from(rows.clamp(1, cap)).unwrap_or(u32::MAX),
                threads: ROW_THREADS,
            }
        }
        _ => tensor_ops_grid(rows, sm_count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_kernel_gets_a_warp_per_row_up_to_its_cap() {
        let grid = |rows| tensor_ops_row_grid(rows, 132);
        assert_eq!(
            grid(0),
            Grid {
                blocks: 1,
                threads: 32
            }
        );
        assert_eq!(
            grid(100),
            Grid {
                blocks: 100,
                threads: 32
            }
        );
        assert_eq!(
            grid(1 << 20),
            Grid {
                blocks: 132 * 32,
                threads: 32
            }
        );
    }

    #[test]
    fn auto_fills_the_device_but_not_beyond_the_work() {
        assert_eq!(
            Launch::Auto.grid(0, 132),
            Some(Grid {
                blocks: 1,
                threads: 256
            })
        );
        assert_eq!(
            Launch::Auto.grid(1000, 132),
            Some(Grid {
                blocks: 4,
                threads: 256
            })
        );
        assert_eq!(
            Launch::Auto.grid(1 << 24, 132),
            Some(Grid {
                blocks: 1056,
                threads: 256
            })
        );
    }

    #[test]
    fn fixed_grids_are_checked() {
        let g = Grid {
            blocks: 3,
            threads: 96,
        };
        assert_eq!(Launch::Fixed(g).grid(10, 1), Some(g));
        assert_eq!(
            Launch::Fixed(Grid {
                blocks: 0,
                threads: 32
            })
            .grid(10, 1),
            None
        );
        assert_eq!(
            Launch::Fixed(Grid {
                blocks: 1,
                threads: 2048
            })
            .grid(10, 1),
            None
        );
    }
}
