"""PEFT's rules for which modules an adapter_config.json adapts and at which rank and alpha, as PEFT's own code has
them (peft/tuners/tuners_utils.py check_target_module_exists, target_modules a list; peft/utils get_pattern_key), on
Python's re. One copy for tools/make_peft_fixtures.py (the fixtures' reference) and tests/peft_patterns.py (what
Attend writes back); neither needs PEFT."""
import re


def matched(module, config):
    """Whether PEFT adapts `module` (its name in the base model) with this adapter_config.json."""
    exclude = config.get("exclude_modules") or []
    if module in exclude or any(module.endswith("." + e) for e in exclude):
        return False
    targets = config["target_modules"]
    if module in targets:
        return True
    found = any(module.endswith("." + t) for t in targets)
    layers = config.get("layers_to_transform")
    if layers is None or layers == [] or not found:
        return found
    layers = [layers] if isinstance(layers, int) else layers
    pattern = config.get("layers_pattern")
    if not pattern:
        index = re.match(r".*\.[^.]*\.(\d+)\.", module)
    else:
        for p in [pattern] if isinstance(pattern, str) else pattern:
            index = re.match(rf".*\.{p}\.(\d+)\.", module)
            if index is not None:
                break
    return index is not None and int(index.group(1)) in layers


def pattern_value(patterns, module, default):
    """PEFT's get_pattern_key, then the value of the key found: rank_pattern's or alpha_pattern's for `module`."""
    for key in patterns or {}:
        if re.match(rf"(.*\.)?({key})$", module):
            return patterns[key]
    return default
