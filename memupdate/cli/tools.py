"""`memupdate tools`: inspect the six memory tools."""

from __future__ import annotations

import json

import typer

app = typer.Typer(help="Inspect the six memory tools.", no_args_is_help=True)



@app.command("schema")
def tools_schema(as_yaml: bool = typer.Option(False, "--yaml", help="Print verl's tool config instead.")) -> None:
    """Print the six tools' OpenAI function schemas (the source of configs/tool_config/memory_tools.yaml)."""
    if as_yaml:
        from memupdate.rl.verl.tool_config import verl_tool_config_yaml

        print(verl_tool_config_yaml(), end="")
        return
    from memupdate.agent.tools import tool_schemas

    print(json.dumps(tool_schemas(), indent=2))


