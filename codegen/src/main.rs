//! `codegen write` regenerates the checked-in files (CRDs and API reference) from the schema;
//! `codegen check` fails, naming each stale file, when they differ from what the schema says.
//! The Rust types are not checked in: the `valkey-api` crate's build script generates them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Emit the CRDs and the API reference from schema/api/*.yaml")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Repository root.
    #[arg(long, default_value = ".")]
    root: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Write the generated files.
    Write,
    /// Fail when a generated file is missing or stale.
    Check,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("codegen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let files = expected_files(&cli.root)?;
    match cli.command {
        Command::Write => {
            for (path, text) in &files {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(path, text)?;
                println!("wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check => {
            let stale: Vec<_> = files
                .iter()
                .filter(|(path, text)| std::fs::read_to_string(path).ok().as_deref() != Some(text))
                .map(|(path, _)| path.display().to_string())
                .collect();
            if stale.is_empty() {
                println!("generated files are up to date");
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("stale generated files (run `make generate`):");
                for path in stale {
                    eprintln!("  {path}");
                }
                Ok(ExitCode::FAILURE)
            }
        }
    }
}

/// Every checked-in file the schema determines, with its contents.
fn expected_files(root: &Path) -> Result<Vec<(PathBuf, String)>, Box<dyn std::error::Error>> {
    let api = codegen::load_dir(&root.join("schema/api"))?;
    let mut files = Vec::new();
    for (name, yaml) in codegen::crd::generate(&api)? {
        files.push((root.join("charts/valkey-operator/crds").join(name), yaml));
    }
    files.push((root.join("docs/api.md"), codegen::docs::generate(&api)?));
    Ok(files)
}
