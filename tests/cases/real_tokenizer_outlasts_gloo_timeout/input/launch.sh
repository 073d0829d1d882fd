torchrun --nproc_per_node=2 --master_port=29733 train.py > console.log 2>&1
