//! Laying out many workgroups within the adapter's per-dimension limit (65535 on most).

use super::Gpu;

/// `workgroups` laid out as `[x, y, 1]` with `x` and `y` within `max_per_dim`. A kernel
/// numbers its workgroups `wid.y * num_workgroups.x + wid.x`; the last row of the grid may
/// hold up to `x - 1` spare workgroups, which must do nothing.
pub fn fold_grid(workgroups: u32, max_per_dim: u32) -> [u32; 3] {
    if workgroups <= max_per_dim {
        return [workgroups, 1, 1];
    }
    let y = workgroups.div_ceil(max_per_dim);
    assert!(
        y <= max_per_dim,
        "{workgroups} workgroups do not fit a {max_per_dim} x {max_per_dim} grid"
    );
    [workgroups.div_ceil(y), y, 1]
}

/// [`fold_grid`] for this adapter.
pub fn grid(gpu: &Gpu, workgroups: usize) -> [u32; 3] {
    let workgroups = u32::try_from(workgroups).expect("more than 2^32 workgroups");
    fold_grid(workgroups, gpu.caps.max_workgroups_per_dim)
}

#[cfg(test)]
mod tests {
    use super::fold_grid;

    #[test]
    fn grids_cover_every_workgroup_within_the_limit() {
        assert_eq!(fold_grid(0, 10), [0, 1, 1]);
        assert_eq!(fold_grid(10, 10), [10, 1, 1]);
        assert_eq!(fold_grid(11, 10), [6, 2, 1]);
        assert_eq!(fold_grid(100, 10), [10, 10, 1]);
        for n in 1..500 {
            let [x, y, _] = fold_grid(n, 23);
            assert!(
                x <= 23 && y <= 23 && x * y >= n && x * (y - 1) < n,
                "{n}: {x} x {y}"
            );
        }
    }
}
