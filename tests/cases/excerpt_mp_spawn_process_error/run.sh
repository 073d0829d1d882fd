#!/bin/bash
# python spawn_own_error.py > console.log 2>&1 (what the terminal showed)
cd "$(dirname "$0")"
/work/torchvenv/bin/python spawn_own_error.py > console.log 2>&1
