# /etc/profile.d/90-nccl.sh on the e02 rack (copied from the old cluster)
export NCCL_SOCKET_IFNAME=ens1f0
export NCCL_IB_HCA=mlx5_2
