//! Structure-aware mutations of a GGUF header: a walk of the valid header records where
//! each count, length, type id, dim, offset, number, key and tensor name lies, and a
//! mutation rewrites one or more of them (or truncates, or flips bytes), so that most
//! mutants get past the magic and the first length into the checks that matter.

use sprout::rng::SplitMix64;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// The tensor count or the metadata count.
    Count,
    /// A string's or an array's length.
    Length,
    /// A metadata value type or an array's element type.
    ValueType,
    GgmlType,
    NDims,
    Dim,
    Offset,
    /// A numeric metadata value.
    Number,
    /// A metadata key's bytes.
    Key,
    /// A tensor name's bytes.
    TensorName,
}

#[derive(Clone, Copy, Debug)]
struct Field {
    kind: Kind,
    at: usize,
    /// Bytes: 4 or 8 for integers, the text's length for keys and names.
    width: usize,
}

/// The header's fields, found by walking it.
pub struct GgufLayout {
    fields: Vec<Field>,
}

struct Walker<'a> {
    b: &'a [u8],
    at: usize,
    fields: Vec<Field>,
}

impl Walker<'_> {
    fn take(&mut self, kind: Kind, width: usize) -> u64 {
        self.fields.push(Field {
            kind,
            at: self.at,
            width,
        });
        let mut v = [0u8; 8];
        v[..width.min(8)].copy_from_slice(&self.b[self.at..self.at + width.min(8)]);
        self.at += width;
        u64::from_le_bytes(v)
    }

    fn string(&mut self, kind: Kind) {
        let n = self.take(Kind::Length, 8) as usize;
        self.take(kind, n);
    }

    fn value(&mut self, ty: u64) {
        match ty {
            0 | 1 | 7 => drop(self.take(Kind::Number, 1)),
            2 | 3 => drop(self.take(Kind::Number, 2)),
            4..=6 => drop(self.take(Kind::Number, 4)),
            10..=12 => drop(self.take(Kind::Number, 8)),
            // String contents are not worth a field each: a length is.
            8 => {
                let n = self.take(Kind::Length, 8) as usize;
                self.at += n;
            }
            9 => {
                let elem = self.take(Kind::ValueType, 4);
                let n = self.take(Kind::Length, 8);
                let before = self.fields.len();
                for _ in 0..n {
                    self.value(elem);
                }
                // Keep the first elements' fields only: long arrays would drown the rest.
                let keep = before + 16;
                if self.fields.len() > keep {
                    self.fields.truncate(keep);
                }
            }
            t => panic!("the fixture has an unknown value type {t}"),
        }
    }
}

impl GgufLayout {
    /// Walks a valid GGUF header (the fixture).
    pub fn of(b: &[u8]) -> GgufLayout {
        let mut w = Walker {
            b,
            at: 8,
            fields: Vec::new(),
        };
        let n_tensors = w.take(Kind::Count, 8);
        let n_kv = w.take(Kind::Count, 8);
        for _ in 0..n_kv {
            w.string(Kind::Key);
            let ty = w.take(Kind::ValueType, 4);
            w.value(ty);
        }
        for _ in 0..n_tensors {
            w.string(Kind::TensorName);
            let n_dims = w.take(Kind::NDims, 4);
            for _ in 0..n_dims {
                w.take(Kind::Dim, 8);
            }
            w.take(Kind::GgmlType, 4);
            w.take(Kind::Offset, 8);
        }
        GgufLayout { fields: w.fields }
    }

    fn pick(&self, rng: &mut SplitMix64, kind: Kind) -> Field {
        let of_kind: Vec<&Field> = self.fields.iter().filter(|f| f.kind == kind).collect();
        *of_kind[rng.below(of_kind.len() as u64) as usize]
    }

    /// One mutant of `base` (the header this layout was walked from), and what was done.
    pub fn mutate(&self, base: &[u8], rng: &mut SplitMix64) -> (Vec<u8>, String) {
        let mut b = base.to_vec();
        let mut done = Vec::new();
        let edits = 1 + rng.below(3);
        for _ in 0..edits {
            done.push(self.edit(&mut b, rng));
        }
        (b, done.join("; "))
    }

    fn edit(&self, b: &mut Vec<u8>, rng: &mut SplitMix64) -> String {
        const NUMERIC: [Kind; 8] = [
            Kind::Count,
            Kind::Length,
            Kind::ValueType,
            Kind::GgmlType,
            Kind::NDims,
            Kind::Dim,
            Kind::Offset,
            Kind::Number,
        ];
        match rng.below(14) {
            0 => {
                let len = rng.below(b.len() as u64 + 1) as usize;
                b.truncate(len);
                format!("truncated to {len}")
            }
            1 => {
                let at = rng.below(b.len().max(1) as u64) as usize;
                if let Some(x) = b.get_mut(at) {
                    *x ^= 1 << rng.below(8);
                }
                format!("flipped a bit at {at}")
            }
            2 => self.write_key(b, rng),
            3 => self.rename_tensor(b, rng),
            _ => {
                let kind = NUMERIC[rng.below(8) as usize];
                let field = self.pick(rng, kind);
                let value = self.interesting(b, field, rng);
                write(b, field, value);
                format!("{kind:?} at {} = {value}", field.at)
            }
        }
    }

    /// A value that tends to break something: a boundary, a power of two, the file's
    /// length, a neighbour of the old value, or another field's value of the same kind.
    fn interesting(&self, b: &[u8], field: Field, rng: &mut SplitMix64) -> u64 {
        let old = read(b, field);
        let len = b.len() as u64;
        match rng.below(6) {
            0 => [0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 31, 32, 33, 48, 64, 65][rng.below(16) as usize],
            1 => 1u64 << rng.below(64),
            2 => (1u64 << rng.below(64)).wrapping_sub(1),
            3 => [len, len.wrapping_sub(1), len + 1, u64::MAX, u64::MAX / 2][rng.below(5) as usize],
            4 => [
                old.wrapping_add(1),
                old.wrapping_sub(1),
                old.wrapping_mul(2),
                old / 2,
            ][rng.below(4) as usize],
            _ => read(b, self.pick(rng, field.kind)),
        }
    }

    /// Rewrites a key as another key of the same length (a duplicate), as
    /// `general.alignment` when it fits, or with one byte changed.
    fn write_key(&self, b: &mut [u8], rng: &mut SplitMix64) -> String {
        let field = self.pick(rng, Kind::Key);
        if field.at + field.width > b.len() {
            return "a key past a truncation, unchanged".into();
        }
        let same_len: Vec<&Field> = self
            .fields
            .iter()
            .filter(|f| f.kind == Kind::Key && f.width == field.width && f.at != field.at)
            .filter(|f| f.at + f.width <= b.len())
            .collect();
        let alignment = b"general.alignment";
        let new: Vec<u8> = match rng.below(3) {
            0 if field.width == alignment.len() => alignment.to_vec(),
            1 if !same_len.is_empty() => {
                let other = same_len[rng.below(same_len.len() as u64) as usize];
                b[other.at..other.at + other.width].to_vec()
            }
            _ => {
                let mut k = b[field.at..field.at + field.width].to_vec();
                if let Some(x) = k.get_mut(rng.below(field.width.max(1) as u64) as usize) {
                    *x = b"._abz0\xff"[rng.below(7) as usize];
                }
                k
            }
        };
        b[field.at..field.at + field.width].copy_from_slice(&new);
        format!("key at {} = {:?}", field.at, String::from_utf8_lossy(&new))
    }

    /// Rewrites a tensor name as another's of the same length (a duplicate) or changes
    /// its layer number's digit (a missing or an extra layer).
    fn rename_tensor(&self, b: &mut [u8], rng: &mut SplitMix64) -> String {
        let field = self.pick(rng, Kind::TensorName);
        let other = self.pick(rng, Kind::TensorName);
        if field.at.max(other.at) + field.width.max(other.width) > b.len() {
            return "a tensor name past a truncation, unchanged".into();
        }
        if other.width == field.width && rng.below(2) == 0 {
            let name = b[other.at..other.at + other.width].to_vec();
            b[field.at..field.at + field.width].copy_from_slice(&name);
        } else if let Some(d) = b[field.at..field.at + field.width]
            .iter()
            .position(u8::is_ascii_digit)
        {
            b[field.at + d] = b'0' + rng.below(10) as u8;
        }
        format!(
            "tensor name at {} = {:?}",
            field.at,
            String::from_utf8_lossy(&b[field.at..field.at + field.width])
        )
    }
}

/// A field's value (the zero-padded little-endian bytes that are still there).
fn read(b: &[u8], f: Field) -> u64 {
    let mut v = [0u8; 8];
    let end = (f.at + f.width.min(8)).min(b.len());
    if f.at < end {
        v[..end - f.at].copy_from_slice(&b[f.at..end]);
    }
    u64::from_le_bytes(v)
}

/// Writes `value` into a field, as many low bytes as the field is wide (and still there).
fn write(b: &mut [u8], f: Field, value: u64) {
    let bytes = value.to_le_bytes();
    for (i, &byte) in bytes.iter().enumerate().take(f.width) {
        if let Some(x) = b.get_mut(f.at + i) {
            *x = byte;
        }
    }
}
