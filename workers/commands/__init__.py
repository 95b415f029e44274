"""One module per command-line verb (`workers.cli`), each a thin shell over the core and the
stream: `add_arguments(parser)` and `run(args) -> int`."""
