//! Where `rollout` and `score` write their JSON lines: a file, or stdout.
//!
//! Lines go out a group at a time (a prompt's samples, or the records scored so far), each
//! group in one write and flushed, so a run that is stopped between groups leaves only
//! whole groups behind. A write that fails (a full disk, a closed pipe, a file-size limit)
//! is an error naming where it was writing; a file is first cut back to the end of its last
//! whole group, so it never holds a torn line, and the command exits non-zero.
//!
//! Invariant: `committed` is the file's length after the last group that was written whole.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};

/// The destination of a command's records.
pub enum RecordSink {
    File {
        path: PathBuf,
        file: File,
        committed: u64,
    },
    Stdout,
}

impl RecordSink {
    /// A new (or emptied) file at `path`.
    pub fn create(path: &Path) -> Result<RecordSink> {
        let file = File::create(path).map_err(|e| anyhow!("creating {}: {e}", path.display()))?;
        Ok(RecordSink::File {
            path: path.to_path_buf(),
            file,
            committed: 0,
        })
    }

    /// The file at `path`, cut to its first `keep` bytes (what an earlier run wrote whole),
    /// to be written on after them.
    pub fn resume(path: &Path, keep: u64) -> Result<RecordSink> {
        let fail = |e: std::io::Error| anyhow!("resuming {}: {e}", path.display());
        let mut file = OpenOptions::new().write(true).open(path).map_err(fail)?;
        file.set_len(keep).map_err(fail)?;
        file.seek(SeekFrom::Start(keep)).map_err(fail)?;
        Ok(RecordSink::File {
            path: path.to_path_buf(),
            file,
            committed: keep,
        })
    }

    /// Writes `lines` (whole lines, each ending in a newline) in one write and flushes.
    pub fn write_group(&mut self, lines: &str) -> Result<()> {
        match self {
            RecordSink::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(lines.as_bytes())
                    .and_then(|()| out.flush())
                    .map_err(|e| anyhow!("writing the records to stdout: {e}"))
            }
            RecordSink::File {
                path,
                file,
                committed,
            } => match file.write_all(lines.as_bytes()).and_then(|()| file.flush()) {
                Ok(()) => {
                    *committed += lines.len() as u64;
                    Ok(())
                }
                Err(e) => {
                    // Cut the part of the group that went out, so no line is torn.
                    let cut = file.set_len(*committed).map_err(|c| {
                        anyhow!(
                            "writing {}: {e}; cutting it back to its last whole group failed \
                             too: {c}",
                            path.display()
                        )
                    });
                    cut?;
                    Err(anyhow!(
                        "writing {}: {e}; it was cut back to its last whole group ({} bytes)",
                        path.display(),
                        committed
                    ))
                }
            },
        }
    }
}
