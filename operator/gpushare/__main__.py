from gpushare.cli import run

run()
