import {AbsoluteFill, CalculateMetadataFunction, useCurrentFrame} from 'remotion';

// Very small and fast composition for automated tests.
export type TinyProps = {
	frames: number;
	color: string;
};

export const tinyMetadata: CalculateMetadataFunction<TinyProps> = ({props}) => {
	const frames = Number(props.frames);
	return {
		durationInFrames:
			Number.isFinite(frames) && frames >= 1 ? Math.floor(frames) : 12,
	};
};

export const Tiny: React.FC<TinyProps> = ({color}) => {
	const frame = useCurrentFrame();
	return (
		<AbsoluteFill
			style={{
				backgroundColor: color,
				color: 'white',
				fontFamily: 'DejaVu Sans, sans-serif',
				fontSize: 48,
				justifyContent: 'center',
				alignItems: 'center',
			}}
		>
			{frame}
		</AbsoluteFill>
	);
};
