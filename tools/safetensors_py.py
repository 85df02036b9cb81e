"""Reads and writes safetensors files in plain Python + torch (the fixture scripts' copy of the format).

write(path, {name: tensor}, dtype="F32"|"BF16"|"F16"): tensors in the order given, header padded with spaces so
the data starts 8-byte aligned, metadata {"format": "pt"}. rounded(t, dtype) gives the float64 values a tensor
holds once stored as dtype. read(path) gives {name: float64 tensor} for F32, BF16 and F16 entries.
"""
import json
import struct

import torch

_TORCH = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def rounded(t, dtype):
    return t.to(_TORCH[dtype]).double()


def _bytes(t, dtype):
    t = t.to(_TORCH[dtype]).contiguous()
    if dtype == "BF16":
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype("<f4" if dtype == "F32" else "<f2").tobytes()


def write(path, tensors, dtype="F32"):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        data = _bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-(8 + len(hj)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        chunk = bytearray(data[b:end])
        if e["dtype"] == "F32":
            flat = torch.frombuffer(chunk, dtype=torch.float32)
        elif e["dtype"] == "F16":
            flat = torch.frombuffer(chunk, dtype=torch.float16)
        elif e["dtype"] == "BF16":
            flat = torch.frombuffer(chunk, dtype=torch.int16).view(torch.bfloat16)
        else:
            raise ValueError(f"{path}: {name} has dtype {e['dtype']}")
        out[name] = flat.double().view(e["shape"]) if e["shape"] else flat.double().view(())
    return out


def write_checkpoint(directory, config, tensors, dtype, golden):
    """A Hugging Face-style fixture directory, emptied first: config.json, model.safetensors (tensors in `dtype`)
    and golden.json (the reference's outputs)."""
    import os
    os.makedirs(directory, exist_ok=True)
    for f in os.listdir(directory):
        os.remove(os.path.join(directory, f))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write(os.path.join(directory, "model.safetensors"), tensors, dtype)
    with open(os.path.join(directory, "golden.json"), "w") as f:
        json.dump(golden, f)
        f.write("\n")
