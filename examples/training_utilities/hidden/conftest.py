pytest_plugins = ["cs_basics.harness.pytest_plugin"]
