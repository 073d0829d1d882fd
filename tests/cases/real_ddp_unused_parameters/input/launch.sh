torchrun --nproc_per_node=2 --master_port=29731 train.py
