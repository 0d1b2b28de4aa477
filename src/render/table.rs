//! Grayscale chains compiled to tables. For stored values of up to 16 bits the whole chain
//! (mask, sign, Modality, VOI, polarity, narrowing) collapses to one 8-bit entry per possible
//! stored value; every backend indexes that same table, which is what makes CPU and GPU
//! outputs identical. Frame statistics for automatic windows are histograms over the same
//! index space.

use crate::render::chain::{self, FrameStats, Resolved};
use crate::render::plan::{GrayPlan, StoredFormat};

/// Largest stored bit depth handled with a table (2^16 entries).
pub const MAX_TABLE_BITS: u16 = 16;

/// How a raw container value becomes a table index: `(raw >> shift) & mask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IndexMap {
    pub shift: u32,
    pub mask: u32,
}

impl IndexMap {
    /// The index map of a stored format, if it fits a table.
    pub fn of(stored: &StoredFormat) -> Option<IndexMap> {
        if stored.bits_stored > MAX_TABLE_BITS {
            return None;
        }
        Some(IndexMap {
            shift: (stored.high_bit + 1 - stored.bits_stored) as u32,
            mask: (1u32 << stored.bits_stored) - 1,
        })
    }

    /// Table length.
    pub fn len(&self) -> usize {
        self.mask as usize + 1
    }

    /// Always false (a table has at least 2 entries); for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Index of a raw container value.
    #[inline]
    pub fn index(&self, raw: u32) -> usize {
        ((raw >> self.shift) & self.mask) as usize
    }
}

/// The stored value (sign-extended) of a table index: the index is the stored bits already
/// shifted and masked, so this is [`StoredFormat::value`] of a container holding it at bit 0.
#[inline]
pub fn stored_of_index(stored: &StoredFormat, index: u32) -> i64 {
    StoredFormat {
        high_bit: stored.bits_stored - 1,
        ..*stored
    }
    .value(index)
}

/// The compiled chain: output byte per table index.
pub fn build_gray_table(plan: &GrayPlan, resolved: &Resolved, map: IndexMap, out: &mut Vec<u8>) {
    out.clear();
    out.extend(
        (0..map.len() as u32)
            .map(|i| chain::gray_output(plan, resolved, stored_of_index(&plan.stored, i))),
    );
}

/// PALETTE COLOR compiled to a table: three output bytes per table index.
pub fn build_palette_table(
    plan: &crate::render::plan::ColorPlan,
    map: IndexMap,
    out: &mut Vec<u8>,
) {
    out.clear();
    for i in 0..map.len() as u32 {
        out.extend_from_slice(&crate::render::color::palette_rgb(plan, i));
    }
}

/// Frame statistics from per-index pixel counts.
pub fn frame_stats(plan: &GrayPlan, counts: &[u32]) -> FrameStats {
    FrameStats::from_stored_counts(
        plan,
        counts
            .iter()
            .enumerate()
            .map(|(i, &n)| (stored_of_index(&plan.stored, i as u32), n as u64)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::plan::{Modality, Voi, Window};
    use crate::render::spec::VoiFunction;

    fn plan(stored: StoredFormat, modality: Modality, voi: Voi) -> GrayPlan {
        GrayPlan {
            stored,
            modality,
            voi,
            invert: false,
            pixels: 512 * 512,
        }
    }

    #[test]
    fn index_map_masks_and_shifts() {
        let s = StoredFormat {
            bits_allocated: 16,
            bits_stored: 12,
            high_bit: 15,
            signed: false,
        };
        let m = IndexMap::of(&s).unwrap();
        assert_eq!(m.len(), 4096);
        assert_eq!(m.index(0xfff0), 4095);
        assert_eq!(m.index(0x000f), 0);
    }

    #[test]
    fn table_matches_scalar_chain_for_every_raw_value() {
        let stored = StoredFormat {
            bits_allocated: 16,
            bits_stored: 12,
            high_bit: 11,
            signed: true,
        };
        let p = plan(
            stored,
            Modality::Rescale {
                slope: 1.0,
                intercept: -1024.0,
            },
            Voi::Window(Window {
                center: 40.0,
                width: 400.0,
                function: VoiFunction::Linear,
            }),
        );
        let r = chain::resolve(&p, None).unwrap();
        let map = IndexMap::of(&stored).unwrap();
        let mut t = Vec::new();
        build_gray_table(&p, &r, map, &mut t);
        for raw in 0..=0xffffu32 {
            let expect = chain::gray_output(&p, &r, stored.value(raw));
            assert_eq!(t[map.index(raw)], expect, "raw {raw:#x}");
        }
    }

    #[test]
    fn frame_stats_are_sorted_post_modality_values() {
        let stored = StoredFormat {
            bits_allocated: 8,
            bits_stored: 8,
            high_bit: 7,
            signed: false,
        };
        let p = plan(
            stored,
            Modality::Rescale {
                slope: -1.0,
                intercept: 0.0,
            },
            Voi::None,
        );
        let mut counts = vec![0u32; 256];
        counts[1] = 3;
        counts[200] = 2;
        let st = frame_stats(&p, &counts);
        assert_eq!(st.inter, vec![(-200, 2), (-1, 3)]);
        assert_eq!((st.stored_min, st.stored_max), (1, 200));
    }
}
