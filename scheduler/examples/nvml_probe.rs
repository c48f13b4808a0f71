//! Prints what NVML reports on this machine, raw and as the scheduler's `NvmlGpu` reads it.
//!
//! ```text
//! cargo run -p ferry-scheduler --features nvml --example nvml_probe -- [--lib PATH] [--nvenc-max N]
//! ```
//!
//! Exit status 0 when NVML answered, 1 when it is not present (the error says why), 2 for bad
//! arguments.

use std::fmt::Display;
use std::process::ExitCode;

use ferry_scheduler::scoring::{GpuProvider, NvmlConfig, NvmlGpu, aggregate};
use nvml_wrapper::enum_wrappers::device::EncoderType;

fn show<T: std::fmt::Debug, E: Display>(what: &str, r: Result<T, E>) {
    match r {
        Ok(v) => println!("  {what}: {v:?}"),
        Err(e) => println!("  {what}: error: {e}"),
    }
}

fn main() -> ExitCode {
    let mut config = NvmlConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--lib", Some(path)) => config.lib_path = Some(path.into()),
            ("--nvenc-max", Some(n)) => match n.parse() {
                Ok(n) => config.nvenc_sessions_max = n,
                Err(e) => {
                    eprintln!("--nvenc-max {n}: {e}");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!("usage: nvml_probe [--lib PATH] [--nvenc-max N]");
                return ExitCode::from(2);
            }
        }
    }

    let mut gpu = match NvmlGpu::new(config) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("{e}");
            return ExitCode::from(1);
        }
    };

    let nvml = gpu.nvml();
    println!("NVML raw");
    show("driver version", nvml.sys_driver_version());
    show("NVML version", nvml.sys_nvml_version());
    show("CUDA driver version", nvml.sys_cuda_driver_version());
    let count = nvml.device_count();
    show("device count", count.as_ref().map_err(ToString::to_string));
    for index in 0..count.unwrap_or(0) {
        println!("device {index}");
        let dev = match nvml.device_by_index(index) {
            Ok(dev) => dev,
            Err(e) => {
                println!("  error: {e}");
                continue;
            }
        };
        show("name", dev.name());
        show("uuid", dev.uuid());
        show(
            "memory (free, total, used, reserved)",
            dev.memory_info()
                .map(|m| (m.free, m.total, m.used, m.reserved)),
        );
        show(
            "encoder_capacity(H264)",
            dev.encoder_capacity(EncoderType::H264),
        );
        show(
            "encoder_capacity(HEVC)",
            dev.encoder_capacity(EncoderType::HEVC),
        );
        show(
            "encoder_stats (sessions, avg fps, avg latency us)",
            dev.encoder_stats()
                .map(|s| (s.session_count, s.average_fps, s.average_latency)),
        );
        show("encoder_sessions", dev.encoder_sessions().map(|s| s.len()));
        show(
            "encoder_utilization (%, sampling us)",
            dev.encoder_utilization()
                .map(|u| (u.utilization, u.sampling_period)),
        );
    }

    println!("\nNvmlGpu::devices()");
    match gpu.devices() {
        Ok(devices) => {
            for d in &devices {
                println!("  {d:?}");
            }
            println!(
                "aggregate (the heartbeat's `gpu`): {:?}",
                aggregate(&devices)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("  error: {e}");
            ExitCode::from(1)
        }
    }
}
