//! Grouping by series and ordering within a series (InstanceNumber, then position along the
//! slice normal, then path), used for the report and the summary. Processing itself does not
//! wait for a series to be complete: outputs need no order, and waiting would stall the
//! pipeline.

use std::cmp::Ordering;
use std::path::Path;

/// What a file contributes to grouping.
#[derive(Debug, Clone)]
pub struct SeriesKey<'a> {
    pub series_uid: Option<&'a str>,
    pub instance_number: Option<i64>,
    pub position: Option<[f64; 3]>,
    pub path: &'a Path,
}

/// Series first (files without a series UID last), then instance number, then position
/// (z, y, x), then path.
pub fn compare(a: &SeriesKey, b: &SeriesKey) -> Ordering {
    let series = match (a.series_uid, b.series_uid) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    series
        .then_with(|| match (a.instance_number, b.instance_number) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
        .then_with(|| match (a.position, b.position) {
            (Some(x), Some(y)) => x[2]
                .total_cmp(&y[2])
                .then(x[1].total_cmp(&y[1]))
                .then(x[0].total_cmp(&y[0])),
            _ => Ordering::Equal,
        })
        .then_with(|| a.path.cmp(b.path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_series_then_instance_then_position() {
        let p = Path::new("x");
        let mut v = [
            SeriesKey {
                series_uid: Some("2"),
                instance_number: Some(1),
                position: None,
                path: p,
            },
            SeriesKey {
                series_uid: Some("1"),
                instance_number: Some(2),
                position: None,
                path: p,
            },
            SeriesKey {
                series_uid: Some("1"),
                instance_number: None,
                position: Some([0.0, 0.0, -5.0]),
                path: p,
            },
            SeriesKey {
                series_uid: Some("1"),
                instance_number: Some(1),
                position: None,
                path: p,
            },
            SeriesKey {
                series_uid: None,
                instance_number: Some(0),
                position: None,
                path: p,
            },
        ];
        v.sort_by(compare);
        let got: Vec<_> = v
            .iter()
            .map(|k| (k.series_uid, k.instance_number))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("1"), Some(1)),
                (Some("1"), Some(2)),
                (Some("1"), None),
                (Some("2"), Some(1)),
                (None, Some(0))
            ]
        );
    }
}
