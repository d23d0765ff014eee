//! `pgtier-manpage --out DIR [--docs DIR] [--version V] [--date YYYY-MM-DD]`: writes
//! DIR/pgtier.1 and DIR/pgtier.ini.5 from the docs (scripts/package.sh runs it).

use std::path::PathBuf;
use std::process::ExitCode;

use pgtier_manpage::{PageInfo, command_page, ini_page};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("pgtier-manpage: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut out = None;
    let mut docs = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs"));
    let mut version = env!("CARGO_PKG_VERSION").to_string();
    let mut date = "1970-01-01".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--out" => out = Some(PathBuf::from(value()?)),
            "--docs" => docs = PathBuf::from(value()?),
            "--version" => version = value()?,
            "--date" => date = value()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let out = out.ok_or("--out DIR is required")?;
    let read = |name: &str| {
        let path = docs.join(name);
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let config_md = read("config.md")?;
    let operations_md = read("operations.md")?;
    let info = PageInfo {
        version: &version,
        date: &date,
    };
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("pgtier.1", command_page(&config_md, &operations_md, &info))?;
    write("pgtier.ini.5", ini_page(&config_md, &info))?;
    Ok(())
}
