//! The encoders against pgwire's own and against PostgreSQL's text.

use super::row::RowEncoder;
use super::value::{PgFloat, encode_value, pg_float_text, pg_float4_text, put};
use proptest::prelude::*;

/// A double of any digits between 1e-4 and 1e15 (the fixed-point
/// range), either sign.
fn fixed_range_double() -> impl Strategy<Value = f64> {
    (-4.0f64..15.0, any::<u32>(), any::<bool>()).prop_map(|(e, bits, neg)| {
        let d = f64::from_bits(10f64.powf(e).to_bits() ^ u64::from(bits & 0xF_FFFF));
        let d = d.clamp(1e-4, 9.999_999_999_999_99e14);
        if neg { -d } else { d }
    })
}

proptest! {
    /// In the fixed-point range the text has no exponent and no `.0`,
    /// reads back as the same value, and has as few digits as
    /// `Display`'s (both are shortest; they differ only in exact ties).
    #[test]
    fn fixed_point_floats_are_shortest_round_trips(
        d in fixed_range_double(),
        whole in any::<i32>(),
        r in -1e6f32..1e6,
    ) {
        let w = f64::from(whole);
        for (v, text, display) in [
            (d, pg_float_text(d), format!("{d}")),
            (w, pg_float_text(w), format!("{w}")),
        ] {
            prop_assert!(!text.contains('e') && !text.ends_with(".0"), "{}", text);
            prop_assert_eq!(text.parse::<f64>().unwrap(), v);
            prop_assert_eq!(text.len(), display.len(), "{} vs {}", text, display);
        }
        if r.abs() >= 1e-4 {
            let text = pg_float4_text(r);
            prop_assert_eq!(text.parse::<f32>().unwrap(), r);
            prop_assert_eq!(text.len(), format!("{r}").len());
        }
    }
}

/// An exact tie between two shortest candidates takes the even digit,
/// as PostgreSQL 15 prints it (`SELECT 448951.625::float4`); Rust's
/// `Display` rounds it up to 448951.63.
#[test]
fn float_ties_round_like_postgres() {
    // Exactly a float4: 448951 and 20/32.
    let tie = 448_951.0 + 20.0 / 32.0;
    assert_eq!(pg_float4_text(tie), "448951.62");
}

/// The per-column fast path writes the same DataRows as the generic
/// per-cell one, NULLs included, in text and binary.
#[test]
fn column_fast_path_equals_generic_encoding() {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::{
        Array, ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    };
    use pgwire::api::Type;
    use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo};

    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![Some("a"), None, Some("ünï")])),
        Arc::new(Int32Array::from(vec![Some(i32::MIN), Some(0), None])),
        Arc::new(Int64Array::from(vec![None, Some(i64::MAX), Some(-7)])),
        Arc::new(Float64Array::from(vec![Some(0.5), None, Some(-1e300)])),
    ];
    let batch = RecordBatch::try_from_iter(
        ["s", "i", "l", "d"]
            .into_iter()
            .zip(columns.iter().cloned()),
    )
    .unwrap();
    for format in [FieldFormat::Text, FieldFormat::Binary] {
        let fields = Arc::new(
            [
                ("s", Type::TEXT),
                ("i", Type::INT4),
                ("l", Type::INT8),
                ("d", Type::FLOAT8),
            ]
            .into_iter()
            .map(|(n, t)| FieldInfo::new(n.into(), None, None, t, format))
            .collect::<Vec<_>>(),
        );
        let mut fast = Vec::new();
        super::encode_batch(&batch, &fields, &mut fast).unwrap();
        let mut generic = RowEncoder::default();
        // The reference: pgwire's own encoder, value by value.
        let mut pg = DataRowEncoder::new(fields.clone());
        let (s, i, l, d) = (
            columns[0].as_string::<i32>(),
            columns[1].as_primitive::<arrow_array::types::Int32Type>(),
            columns[2].as_primitive::<arrow_array::types::Int64Type>(),
            columns[3].as_primitive::<arrow_array::types::Float64Type>(),
        );
        for (row, got) in fast.iter().enumerate() {
            for (col, field) in columns.iter().zip(fields.iter()) {
                encode_value(&mut generic, col, row, field).unwrap();
            }
            assert_eq!(got.data, generic.take_row().data, "{format:?} row {row}");
            pg.encode_field(&s.is_valid(row).then(|| s.value(row)))
                .unwrap();
            pg.encode_field(&i.is_valid(row).then(|| i.value(row)))
                .unwrap();
            pg.encode_field(&l.is_valid(row).then(|| l.value(row)))
                .unwrap();
            pg.encode_field(&d.is_valid(row).then(|| PgFloat::F8(d.value(row))))
                .unwrap();
            let want = pg.take_row();
            assert_eq!(got.data, want.data, "{format:?} row {row} (pgwire)");
            assert_eq!(got.field_count, want.field_count);
        }
        assert_eq!(fast.len(), 3);
    }
    let mut rows = Vec::new();
    let fields = Arc::new(vec![FieldInfo::new(
        "i".into(),
        None,
        None,
        Type::INT4,
        FieldFormat::Text,
    )]);
    let one = RecordBatch::try_from_iter([("i", columns[1].clone())]).unwrap();
    super::encode_batch(&one, &fields, &mut rows).unwrap();
    let texts: Vec<_> = rows
        .iter()
        .map(|r| super::text_values(r)[0].clone())
        .collect();
    assert_eq!(
        texts,
        [Some("-2147483648".to_owned()), Some("0".to_owned()), None]
    );
}

#[test]
fn floats_print_like_postgres() {
    for (v, want) in [
        (41.0, "41"),
        (2.5, "2.5"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e20, "1e+20"),
        (1.5e-5, "1.5e-05"),
        (-0.0001, "-0.0001"),
        (123456789012345.0, "123456789012345"),
        (1e15, "1e+15"),
        (f64::NAN, "NaN"),
        (f64::NEG_INFINITY, "-Infinity"),
    ] {
        assert_eq!(pg_float_text(v), want, "{v}");
    }
}

/// Floats go into DataRows without a `String`: the text written into
/// the row's buffer is PostgreSQL's, for doubles and reals, including
/// the exponent forms, and binary stays IEEE bytes.
#[test]
fn floats_in_data_rows() {
    use pgwire::api::Type;
    use pgwire::api::results::{FieldFormat, FieldInfo};
    let fields = std::sync::Arc::new(vec![
        FieldInfo::new("d".into(), None, None, Type::FLOAT8, FieldFormat::Text),
        FieldInfo::new("r".into(), None, None, Type::FLOAT4, FieldFormat::Text),
        FieldInfo::new("b".into(), None, None, Type::FLOAT8, FieldFormat::Binary),
    ]);
    let mut enc = RowEncoder::default();
    for (d, r, want_d, want_r) in [
        (1e20, 1e6_f32, "1e+20", "1e+06"),
        (
            -2.2250738585072014e-308,
            0.1_f32,
            "-2.2250738585072014e-308",
            "0.1",
        ),
        (2.5, f32::INFINITY, "2.5", "Infinity"),
    ] {
        for (i, v) in [PgFloat::F8(d), PgFloat::F4(r), PgFloat::F8(d)]
            .iter()
            .enumerate()
        {
            put(&mut enc, &fields[i], v).unwrap();
        }
        let row = enc.take_row();
        let texts = super::text_values(&row);
        assert_eq!(texts[0].as_deref(), Some(want_d));
        assert_eq!(texts[1].as_deref(), Some(want_r));
        // The binary field: 8 bytes, the double's bits.
        let data = &row.data[..];
        assert_eq!(&data[data.len() - 12..data.len() - 8], &8i32.to_be_bytes());
        assert_eq!(&data[data.len() - 8..], &d.to_be_bytes());
    }
}
