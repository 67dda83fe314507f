"""weft's command-line programs, kept out of the Dagster code location: the ``weft`` command
(:mod:`cli.instance`: Dagster's CLI on weft's instance, ``weft job`` / ``weft materialize``),
the run launcher its runs use (:mod:`cli.launcher`), the console that routes a run's output
(:mod:`cli.console`) and ``make demo`` (:mod:`cli.demo`). They import the code location
(``assets.definitions``); nothing in ``assets/`` imports them."""
