"""``ringrun.run``'s keyword arguments (Horovod's ``horovod.run``) as ringrun's command line.

Each becomes the horovodrun option of the same meaning, which ringrun takes as horovodrun does,
maps onto its own, or refuses with what to do instead (ringrun(1), HOROVODRUN OPTIONS): the
command line stays the one place that decides.
"""


def command_line(num_proc=1, min_num_proc=None, max_num_proc=None, slots=None, reset_limit=None,
                 cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
                 start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None,
                 output_filename=None, verbose=None, use_gloo=None, use_mpi=None, mpi_args=None,
                 network_interfaces=None):
    """ringrun's options (a list of str) for these arguments; ValueError for two that exclude each
    other, as horovod.run raises."""
    if hosts is not None and hostfile is not None:
        raise ValueError("ringrun.run: give hosts= or hostfile=, not both")
    if use_gloo and use_mpi:
        raise ValueError("ringrun.run: give use_gloo=True or use_mpi=True, not both")
    argv = ["-np", str(num_proc)]
    valued = [("--min-np", min_num_proc), ("--max-np", max_num_proc), ("--slots-per-host", slots),
              ("--reset-limit", reset_limit), ("-H", hosts), ("--hostfile", hostfile),
              ("--host-discovery-script", host_discovery_script), ("--start-timeout", start_timeout),
              ("-p", ssh_port), ("-i", ssh_identity_file), ("--output-filename", output_filename),
              ("--mpi-args", mpi_args)]
    for option, value in valued:
        if value is not None:
            argv += [option, str(value)]
    if cooldown_range is not None:
        low, high = cooldown_range
        argv += ["--blacklist-cooldown-range", str(low), str(high)]
    if network_interfaces:
        names = network_interfaces.split(",") if isinstance(network_interfaces, str) else list(network_interfaces)
        argv += ["--network-interfaces", ",".join(names)]
    flags = [("--disable-cache", disable_cache), ("-v", verbose), ("--gloo", use_gloo), ("--mpi", use_mpi)]
    argv += [option for option, on in flags if on]
    return argv
